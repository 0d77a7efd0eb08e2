"""What the agent asks the engine over its own HTTP port: is it healthy, and how many requests does it
still hold (Prometheus gauges SGLang and the sim engine export). Standard library only."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from semipd.agent import httpwire
from semipd.agent.drivers import HealthEndpoint
from semipd.agent.supervision import SupervisionError

log = logging.getLogger("semipd.agent")

INFLIGHT_GAUGES = ("sglang:num_running_reqs", "sglang:num_queue_reqs")
"""Requests being served and queued (SGLang's names; the sim engine exports the same)."""


async def await_healthy(
    health: HealthEndpoint | None, check_owner: Callable[[], None], timeout: float, poll: float
) -> None:
    """Until the health endpoint answers 200; `check_owner` raises if the engine died meanwhile."""
    deadline = time.monotonic() + timeout
    last = "no health endpoint"
    while True:
        check_owner()
        if health is None:
            return
        try:
            resp = await httpwire.request_tcp(health.host, health.port, "GET", health.path, timeout=2.0)
            if resp.status == 200:
                return
            last = f"status {resp.status}"
        except (OSError, httpwire.HttpError, *httpwire.TIMEOUT_ERRORS) as e:
            last = repr(e)
        if time.monotonic() > deadline:
            raise SupervisionError(
                f"engine health http://{health.host}:{health.port}{health.path} not OK within {timeout}s: {last}"
            )
        await asyncio.sleep(poll)


def inflight_from_metrics(text: str) -> int | None:
    """Requests running + queued from a Prometheus text page; None when neither gauge is there."""
    total, seen = 0.0, False
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in INFLIGHT_GAUGES:
            try:
                total += float(line.rsplit(" ", 1)[1])
            except (IndexError, ValueError):
                continue
            seen = True
    return round(total) if seen else None


async def inflight(health: HealthEndpoint) -> int | None:
    """Requests the engine holds now; None when it cannot tell (no metrics, no answer)."""
    try:
        resp = await httpwire.request_tcp(health.host, health.port, "GET", "/metrics", timeout=2.0)
    except (OSError, httpwire.HttpError, *httpwire.TIMEOUT_ERRORS):
        return None
    if resp.status != 200:
        return None
    return inflight_from_metrics(resp.body.decode("utf-8", "replace"))


async def await_idle(health: HealthEndpoint | None, timeout: float, poll: float) -> int:
    """Wait until the engine holds no request or `timeout` passes; the requests still held (0 when
    idle or when the engine cannot tell, which is logged)."""
    if health is None:
        return 0
    deadline = time.monotonic() + timeout
    while True:
        n = await inflight(health)
        if n is None:
            log.warning("engine exports no in-flight gauges (%s); not waiting for requests", ", ".join(INFLIGHT_GAUGES))
            return 0
        if n == 0 or time.monotonic() > deadline:
            return n
        await asyncio.sleep(poll)
