"""A tiny OpenAI-style streaming server on 127.0.0.1 for load-generator tests (fixtures in conftest).

It runs in its own thread and event loop so both async tests and the synchronous CLI (asyncio.run)
can use it. The request's `model` field picks a behaviour; bodies and concurrency are recorded.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web


@dataclass
class FakeEngine:
    url: str = ""
    bodies: list[dict[str, Any]] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    prefill_s: float = 0.02
    token_s: float = 0.005


ENGINE = web.AppKey("engine", FakeEngine)


async def _completions(request: web.Request) -> web.StreamResponse:
    eng = request.app[ENGINE]
    body = await request.json()
    eng.bodies.append(body)
    behaviour = body.get("model", "ok")
    if behaviour == "http500":
        return web.json_response({"error": "boom"}, status=500)
    eng.in_flight += 1
    eng.max_in_flight = max(eng.max_in_flight, eng.in_flight)
    try:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        n = int(body["max_tokens"])
        if behaviour == "short":
            n = max(1, n // 2)
        await asyncio.sleep(10.0 if behaviour == "slow" else eng.prefill_s)
        for i in range(n):
            if i:
                await asyncio.sleep(eng.token_s)
            if behaviour == "error_event" and i == 1:
                await resp.write(b'data: {"error": {"message": "engine died"}}\n\n')
                return resp
            if behaviour == "truncate" and i == 2:
                return resp
            finish = "length" if i == n - 1 else None
            chunk = {"choices": [{"index": 0, "text": f" t{i}", "finish_reason": finish}]}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        usage = {"choices": [], "usage": {"prompt_tokens": body.get("prompt_tokens", 0), "completion_tokens": n}}
        await resp.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        return resp
    finally:
        eng.in_flight -= 1


@pytest.fixture
def fake_engines() -> Iterator[list[FakeEngine]]:
    """Two fake engines on 127.0.0.1 (ephemeral ports)."""
    engines = [FakeEngine(), FakeEngine()]
    loop = asyncio.new_event_loop()
    runners: list[web.AppRunner] = []
    ready = threading.Event()

    async def start() -> None:
        for eng in engines:
            app = web.Application()
            app[ENGINE] = eng
            app.router.add_post("/v1/completions", _completions)
            runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.5)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = runner.addresses[0][1]
            eng.url = f"http://127.0.0.1:{port}"
            runners.append(runner)

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(10), "fake engines did not start"
    try:
        yield engines
    finally:

        async def stop() -> None:
            for r in runners:
                await r.shutdown()
                await r.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@pytest.fixture
def fake_engine(fake_engines: list[FakeEngine]) -> FakeEngine:
    return fake_engines[0]
