"""The agent's admin HTTP API (its own port on the pod IP); routing and auth in front of the supervisor.

GET /healthz            liveness, no auth
GET /readyz             200 while the engine is serving (not starting/restarting/draining), no auth
GET /v1/split           current split, state, last switch and last error        (bearer token)
PUT /v1/split           {"prefillPercent": P, "decodePercent": D}; ?wait=false -> 202 (bearer token)
GET /v1/experts         expert placement version in force                        (bearer token)
PUT /v1/experts         a semipd.io/expert-placement envelope (agent/experts.py)  (bearer token)
GET /metrics            Prometheus text                                          (bearer token)
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from semipd.agent import httpwire
from semipd.agent.auth import TokenError, TokenFile, bearer_matches
from semipd.agent.experts import ExpertsEndpoint
from semipd.agent.promtext import CONTENT_TYPE
from semipd.agent.split import SplitRequestError, parse_split_request
from semipd.agent.supervisor import Supervisor, SwitchFailed, SwitchRejected

log = logging.getLogger("semipd.agent.admin")

REQUEST_READ_TIMEOUT = 10.0
READY_TIMEOUT = 2.0
ROUTES = {
    "/healthz": ("GET",),
    "/readyz": ("GET",),
    "/v1/split": ("GET", "PUT"),
    "/v1/experts": ("GET", "PUT"),
    "/metrics": ("GET",),
}
PUBLIC = ("/healthz", "/readyz")


def _error(status: int, reason: str, message: str, extra: dict[str, str] | None = None) -> bytes:
    return httpwire.json_response(status, {"error": message, "reason": reason}, extra)


class AdminServer:
    def __init__(self, supervisor: Supervisor, tokens: TokenFile, host: str, port: int) -> None:
        self.sup = supervisor
        self.tokens = tokens
        self.host = host
        self.port = port
        self.experts = ExpertsEndpoint(supervisor)
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, reuse_address=True)
        log.info("admin API listening on %s:%d", self.host, self.port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                req = await asyncio.wait_for(httpwire.read_request(reader), REQUEST_READ_TIMEOUT)
            except httpwire.HttpError as e:
                writer.write(_error(e.status, "BadRequest", e.message))
                return
            except httpwire.TIMEOUT_ERRORS:
                writer.write(_error(408, "RequestTimeout", "request not received in time"))
                return
            if req is None:
                return
            writer.write(await self.handle(req))
            await writer.drain()
        except (ConnectionError, OSError) as e:
            log.debug("admin connection error: %s", e)
        finally:
            writer.close()

    def _authorized(self, req: httpwire.Request) -> bytes | None:
        """None when authorized, else the response to send."""
        try:
            token = self.tokens.token()
        except TokenError as e:
            log.error("%s; refusing admin calls", e)
            return _error(401, "Unauthorized", "the agent has no usable token file")
        if not bearer_matches(req.header("authorization"), token):
            return _error(401, "Unauthorized", "missing or wrong bearer token", {"WWW-Authenticate": "Bearer"})
        return None

    async def handle(self, req: httpwire.Request) -> bytes:
        if req.path not in PUBLIC:
            denied = self._authorized(req)
            if denied is not None:
                return denied
        methods = ROUTES.get(req.path)
        if methods is None:
            return _error(404, "NotFound", f"no route {req.path}")
        if req.method not in methods:
            return _error(
                405, "MethodNotAllowed", f"{req.method} not allowed on {req.path}", {"Allow": ", ".join(methods)}
            )
        if req.path == "/healthz":
            return httpwire.json_response(200, {"status": "ok", "state": self.sup.state})
        if req.path == "/readyz":
            return await self._readyz()
        if req.path == "/metrics":
            return httpwire.render_response(200, self.sup.metrics.render().encode(), CONTENT_TYPE)
        if req.path == "/v1/experts":
            return await (self.experts.get() if req.method == "GET" else self.experts.put(req.body))
        if req.method == "GET":
            return httpwire.json_response(200, self.sup.status())
        return await self._put_split(req)

    async def _readyz(self) -> bytes:
        """Ready = the agent is serving (not starting, restarting or draining) and the engine's own
        health endpoint, where the driver knows one, answers 200."""
        state = {"state": self.sup.state}
        if not self.sup.ready:
            return httpwire.json_response(503, state)
        health = self.sup.s.health
        if health is not None:
            try:
                resp = await httpwire.request_tcp(health.host, health.port, "GET", health.path, timeout=READY_TIMEOUT)
                engine = f"status {resp.status}"
            except (OSError, httpwire.HttpError, *httpwire.TIMEOUT_ERRORS) as e:
                resp, engine = None, f"unreachable: {e!r}"
            if resp is None or resp.status != 200:
                return httpwire.json_response(503, {**state, "engine": engine})
        return httpwire.json_response(200, state)

    async def _put_split(self, req: httpwire.Request) -> bytes:
        try:
            target = parse_split_request(req.body, self.sup.split, self.sup.s.bounds)
        except SplitRequestError as e:
            return _error(400, "BadRequest", str(e))
        try:
            task = self.sup.begin_switch(target)
        except SwitchRejected as e:
            return _error(e.status, e.reason, e.message)
        if task is None:
            return httpwire.json_response(200, {"changed": False, **self.sup.status()})
        if req.query.get("wait", "true").lower() in ("false", "0", "no"):
            return httpwire.json_response(202, {"changed": True, "accepted": target.to_json(), **self.sup.status()})
        try:
            record = await asyncio.shield(task)
        except SwitchFailed as e:
            body: dict[str, Any] = {"error": str(e), "reason": "SwitchFailed", "changed": False}
            return httpwire.json_response(500, {**self.sup.status(), **body})
        except asyncio.CancelledError:
            return _error(503, "ShuttingDown", "the agent stopped while the switch ran")
        return httpwire.json_response(
            200, {"changed": True, "durationSeconds": round(record.duration, 6), **self.sup.status()}
        )
