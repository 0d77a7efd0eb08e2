"""Per-pool runs: bounded, timed out, a stuck pool delays no other, a re-trigger is kept once."""

from __future__ import annotations

import asyncio
import logging

import pytest

from semipd.controller.pooltasks import Key, PoolTasks

log = logging.getLogger("test")


def test_a_stuck_pool_does_not_delay_the_others(caplog: pytest.LogCaptureFixture) -> None:
    done: dict[Key, float] = {}

    async def scenario() -> float:
        loop = asyncio.get_running_loop()
        t0 = loop.time()

        async def work(key: Key) -> None:
            if key == ("ns", "stuck"):
                await asyncio.sleep(3600)  # a call that never returns
            await asyncio.sleep(0.05)
            done[key] = loop.time() - t0

        tasks = PoolTasks(work, limit=4, timeout=0.5, logger=log, what="reconcile")
        for key in [("ns", "stuck"), *[("ns", f"p{i}") for i in range(6)]]:
            tasks.submit(key)
        await tasks.drain()
        return loop.time() - t0

    total = asyncio.run(scenario())
    assert ("ns", "stuck") not in done
    assert len(done) == 6
    assert max(done.values()) < 0.4  # all six finished while the stuck one still held its slot
    assert 0.5 <= total < 1.5  # the stuck run was abandoned at its timeout
    assert "took over 0.5s; abandoned" in caplog.text


def test_concurrency_is_bounded() -> None:
    running, peak = 0, 0

    async def work(key: Key) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.02)
        running -= 1

    async def scenario() -> None:
        tasks = PoolTasks(work, limit=3, timeout=5, logger=log, what="reconcile")
        for i in range(20):
            tasks.submit(("ns", f"p{i}"))
        await tasks.drain()

    asyncio.run(scenario())
    assert peak == 3


def test_a_trigger_during_a_run_runs_once_more_after_it() -> None:
    runs: list[Key] = []

    async def scenario() -> None:
        gate = asyncio.Event()

        async def work(key: Key) -> None:
            runs.append(key)
            await gate.wait()

        tasks = PoolTasks(work, limit=2, timeout=5, logger=log, what="reconcile")
        tasks.submit(("ns", "a"))
        await asyncio.sleep(0.01)
        for _ in range(5):  # a burst while the first run is in flight
            tasks.submit(("ns", "a"))
        assert tasks.busy(("ns", "a"))
        gate.set()
        await tasks.drain()
        assert not tasks.busy(("ns", "a"))

    asyncio.run(scenario())
    assert runs == [("ns", "a"), ("ns", "a")]


def test_a_failing_run_is_logged_and_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    ok: list[Key] = []

    async def work(key: Key) -> None:
        if key[1] == "bad":
            raise RuntimeError("boom")
        ok.append(key)

    async def scenario() -> None:
        tasks = PoolTasks(work, limit=2, timeout=5, logger=log, what="reconcile")
        tasks.submit(("ns", "bad"))
        tasks.submit(("ns", "good"))
        await tasks.drain()

    asyncio.run(scenario())
    assert ok == [("ns", "good")]
    assert "reconcile of ns/bad failed" in caplog.text
