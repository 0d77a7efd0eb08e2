"""The operator's agent client against a real HTTP server on 127.0.0.1: reads, writes, retries."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from semipd.controller import agents
from semipd.controller.agents import AgentClient

TOKEN = "t0k"


@pytest.fixture
async def agent(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[int, dict[str, Any]]]:
    monkeypatch.setattr(agents.asyncio, "sleep", _no_sleep)
    seen: dict[str, Any] = {"puts": [], "busy": 1}

    def authorized(req: web.Request) -> bool:
        return req.headers.get("Authorization") == f"Bearer {TOKEN}"

    async def get_split(req: web.Request) -> web.Response:
        if not authorized(req):
            return web.json_response({"error": "unauthorized"}, status=401)
        return web.json_response({"prefillPercent": 60, "decodePercent": 100})

    async def put_split(req: web.Request) -> web.Response:
        seen["puts"].append(("split", dict(req.query), await req.json()))
        if seen["busy"] > 0:  # one 409 first: the client must retry
            seen["busy"] -= 1
            return web.json_response({"error": "switch in progress"}, status=409)
        return web.json_response({}, status=202)

    async def get_experts(req: web.Request) -> web.Response:
        return web.json_response({"version": 3} if authorized(req) else {}, status=200 if authorized(req) else 401)

    async def put_experts(req: web.Request) -> web.Response:
        seen["puts"].append(("experts", req.headers.get("Content-Type"), await req.text()))
        return web.json_response({"error": "bad map"}, status=400)

    app = web.Application()
    app.add_routes(
        [
            web.get("/v1/split", get_split),
            web.put("/v1/split", put_split),
            web.get("/v1/experts", get_experts),
            web.put("/v1/experts", put_experts),
        ]
    )
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield port, seen
    finally:
        await runner.cleanup()


async def _no_sleep(_: float) -> None:
    return None


async def test_reads_with_the_token_and_unknown_without_it(agent: tuple[int, dict[str, Any]]) -> None:
    port, _ = agent
    client = AgentClient()
    try:
        assert await client.split("127.0.0.1", port, TOKEN) == (60, 100)
        assert await client.split("127.0.0.1", port, "wrong") is None
        assert await client.experts("127.0.0.1", port, TOKEN) == {"version": 3}
        assert await client.experts("127.0.0.1", port, "wrong") is None
    finally:
        await client.close()


async def test_writes_retry_a_busy_agent_and_report_other_errors(agent: tuple[int, dict[str, Any]]) -> None:
    port, seen = agent
    client = AgentClient()
    try:
        assert await client.set_split("127.0.0.1", port, TOKEN, 70, 100) is None
        assert seen["puts"] == [("split", {"wait": "false"}, {"prefillPercent": 70, "decodePercent": 100})] * 2
        error = await client.set_experts("127.0.0.1", port, TOKEN, '{"version": 4}')
        assert error is not None
        assert error.startswith("HTTP 400")
        assert seen["puts"][-1] == ("experts", "application/json", '{"version": 4}')
        assert len(seen["puts"]) == 3  # a 400 is not retried
    finally:
        await client.close()
