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
import contextlib
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
MAX_CONNECTIONS = 32
"""Concurrent admin connections; more are answered 503 at once (the operator needs one or two)."""
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
        self._open = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, reuse_address=True)
        log.info("admin API listening on %s:%d", self.host, self.port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open += 1
        try:
            if self._open > MAX_CONNECTIONS:
                writer.write(_error(503, "TooManyConnections", f"more than {MAX_CONNECTIONS} open connections"))
                # Take what the peer already sent, so closing does not reset the connection before it reads this.
                with contextlib.suppress(*httpwire.TIMEOUT_ERRORS):
                    await asyncio.wait_for(reader.read(httpwire.MAX_HEADER_BYTES), 0.05)
            else:
                writer.write(await self._respond(reader))
            await writer.drain()
        except (ConnectionError, OSError) as e:
            log.debug("admin connection error: %s", e)
        except Exception:  # a handler bug must cost one 500, never the connection task
            log.exception("admin request failed")
            with contextlib.suppress(ConnectionError, OSError):
                writer.write(_error(500, "InternalError", "the agent failed to handle the request"))
        finally:
            self._open -= 1
            writer.close()

    async def _respond(self, reader: asyncio.StreamReader) -> bytes:
        try:
            got = await asyncio.wait_for(self._read_authorized(reader), REQUEST_READ_TIMEOUT)
        except httpwire.HttpError as e:
            return _error(e.status, "BadRequest", e.message)
        except httpwire.TIMEOUT_ERRORS:
            return _error(408, "RequestTimeout", "request not received in time")
        return got if isinstance(got, bytes) else await self.handle(got)

    async def _read_authorized(self, reader: asyncio.StreamReader) -> httpwire.Request | bytes:
        """Read the head, authorize, then read the body: an unauthenticated peer never gets to send one."""
        head = await httpwire.read_head(reader)
        if head is None:
            return b""
        if head.path not in PUBLIC:
            denied = self._authorized(head)
            if denied is not None:
                return denied
        return await httpwire.read_body(reader, head)

    def _authorized(self, req: httpwire.Request | httpwire.RequestHead) -> bytes | None:
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
