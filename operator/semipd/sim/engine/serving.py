"""The simulated engine's public OpenAI-compatible API: completions and chat (streamed or whole),
models, health and Prometheus metrics, served from the decode owner's queues.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from semipd.sim.engine.openai import (
    CHAT,
    COMPLETION,
    BadRequest,
    full_response,
    parse_generation,
    role_chunk,
    stream_chunk_encoder,
    token_text,
    usage_chunk,
)
from semipd.sim.engine.requests import FINISHED, SimRequest

if TYPE_CHECKING:
    from semipd.sim.engine.owner import DecodeOwner


def _error(status: int, message: str, kind: str = "invalid_request_error") -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind, "code": status}}, status=status)


def _sse(doc: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n"


class PublicApi:
    """The public routes of one decode owner."""

    def __init__(self, owner: DecodeOwner) -> None:
        self.owner = owner
        self._ids = itertools.count()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        return app

    async def _health(self, request: web.Request) -> web.Response:
        if not self.owner.admitting:
            return web.json_response({"status": "draining"}, status=503)
        if self.owner.active is None:
            return web.json_response({"status": "no ready prefill worker"}, status=503)
        return web.json_response({"status": "ok"})

    async def _metrics(self, request: web.Request) -> web.Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        self.owner._publish()
        body = generate_latest(self.owner.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _models(self, request: web.Request) -> web.Response:
        name = self.owner.cfg.served_model_name
        return web.json_response({"object": "list", "data": [{"id": name, "object": "model", "owned_by": "semipd"}]})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, COMPLETION)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, CHAT)

    async def _generate(self, request: web.Request, kind: str) -> web.StreamResponse:
        if not self.owner.admitting:
            return _error(503, "the engine is draining and admits no new requests", "service_unavailable")
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            return _error(400, "body is not valid JSON")
        try:
            gen = parse_generation(body, kind, self.owner.limits)
        except BadRequest as e:
            return _error(400, str(e))
        need, capacity = gen.prompt_tokens + gen.max_tokens, self.owner.kv.capacity
        if need > capacity:
            return _error(400, f"request needs {need} KV tokens; pool holds {capacity}")
        prefix = "cmpl" if kind == COMPLETION else "chatcmpl"
        r = SimRequest(f"{prefix}-{next(self._ids)}", gen, time.monotonic())
        self.owner.open_generations += 1
        self.owner._idle.clear()
        self.owner.waiting.append(r)
        self.owner._dispatch.set()
        try:
            if gen.stream:
                return await self._stream(request, r)
            return await self._complete(r)
        except (asyncio.CancelledError, ConnectionError):
            self._abort(r)
            raise
        finally:
            self.owner.open_generations -= 1
            if self.owner.open_generations == 0:
                self.owner._idle.set()

    def _abort(self, r: SimRequest) -> None:
        if r.generated >= r.gen.max_tokens:
            return
        r.aborted = True
        self.owner.metrics.aborted.inc()
        if r.waiting:
            with contextlib.suppress(ValueError):
                self.owner.waiting.remove(r)
            self.owner._release(r)
            self.owner._dispatch.set()

    async def _stream(self, request: web.Request, r: SimRequest) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        created = int(time.time())
        if r.gen.kind == CHAT:
            await resp.write(_sse(role_chunk(r.gen, r.rid, created)))
        encode = stream_chunk_encoder(r.gen, r.rid, created)
        finished = False
        while not finished:
            # Tokens that queued up while this handler waited go out in one write.
            pieces = [await r.events.get()]
            while not r.events.empty():
                pieces.append(r.events.get_nowait())
            out = []
            for index in pieces:
                if index == FINISHED:
                    finished = True
                    break
                last = index + 1 >= r.gen.max_tokens
                out.append(b"data: " + encode(token_text(index), "length" if last else None) + b"\n\n")
            if out:
                await resp.write(b"".join(out))
        if r.gen.include_usage:
            await resp.write(_sse(usage_chunk(r.gen, r.rid, created, r.generated)))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _complete(self, r: SimRequest) -> web.Response:
        pieces = []
        while True:
            index = await r.events.get()
            if index == FINISHED:
                break
            pieces.append(token_text(index))
        return web.json_response(full_response(r.gen, r.rid, int(time.time()), "".join(pieces), r.generated))
