"""Agent lifecycle with real processes: SIGTERM drains in-flight streams; the engine's status is the exit."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable

import aiohttp

from semipd.sim.engine.localpod import LocalPod, PodOptions
from semipd.sim.engine.probe import stream_completion


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


async def wait_for_tokens(pod: LocalPod, count: int, timeout: float) -> None:
    """Until the engine has started streaming `count` requests (all in decode)."""
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            async with session.get(pod.engine_url + "/metrics") as resp:
                text = await resp.text()
            line = next(ln for ln in text.splitlines() if ln.startswith("sglang:num_running_reqs{"))
            if float(line.rsplit(" ", 1)[1]) >= count and "sglang:num_queue_reqs{" in text:
                queued = next(ln for ln in text.splitlines() if ln.startswith("sglang:num_queue_reqs{"))
                if float(queued.rsplit(" ", 1)[1]) == 0:
                    return
            await asyncio.sleep(0.02)
    raise TimeoutError("streams did not start")


async def test_sigterm_drains_in_flight_streams_then_exits_with_engine_status(
    pod_factory: Callable[..., LocalPod],
) -> None:
    pod = pod_factory(PodOptions(speedup=2.0, agent_args=["--drain-timeout", "30"]))
    pids = pod.pids()
    async with aiohttp.ClientSession() as session:
        started = time.monotonic()
        streams = [
            asyncio.ensure_future(stream_completion(session, pod.engine_url, 200, 600, chat=i % 2 == 1))
            for i in range(10)
        ]
        await wait_for_tokens(pod, 10, timeout=20)
        sent_sigterm = time.monotonic()
        pod.signal(signal.SIGTERM)
        await asyncio.sleep(0.2)
        # Draining: the engine admits nothing new while the old streams finish.
        late = await stream_completion(session, pod.engine_url, 10, 5)
        results = await asyncio.wait_for(asyncio.gather(*streams), timeout=60)
    assert not late.ok
    assert late.error is not None
    assert "503" in late.error or "Connect" in late.error
    assert all(r.ok for r in results), [r.error for r in results]
    # They were genuinely in flight at SIGTERM: each kept streaming well after it.
    assert min(started + r.e2e for r in results) > sent_sigterm + 0.3
    rc = await asyncio.to_thread(pod.wait, 60)
    assert rc == 0  # the sim engine exits 0 after a graceful drain; the agent passes it through
    assert not alive(pids["engine"])
    assert not any(alive(p) for p in pids["workers"].values())


def test_engine_death_ends_the_agent_with_the_engine_status(pod_factory: Callable[..., LocalPod]) -> None:
    pod = pod_factory(PodOptions(speedup=20.0))
    pids = pod.pids()
    os.kill(pids["engine"], signal.SIGKILL)
    rc = pod.wait(30)
    assert rc == 128 + signal.SIGKILL
    assert not any(alive(p) for p in pids["workers"].values())
    assert "exited with status 137" in pod.log_tail()


def test_forwarded_signal_reaches_engine(pod_factory: Callable[..., LocalPod]) -> None:
    # SIGUSR1 is forwarded to the engine's process group; the sim engine has no handler, so
    # the default action (terminate) proves delivery, and the agent then exits with 128+SIGUSR1.
    pod = pod_factory(PodOptions(speedup=20.0))
    pod.signal(signal.SIGUSR1)
    assert pod.wait(30) == 128 + signal.SIGUSR1


async def test_drain_delay_keeps_serving_with_readiness_off_then_drains(
    pod_factory: Callable[..., LocalPod],
) -> None:
    pod = pod_factory(PodOptions(speedup=20.0, agent_args=["--drain-delay", "1.5", "--drain-timeout", "10"]))
    async with aiohttp.ClientSession() as session:
        pod.signal(signal.SIGTERM)
        await asyncio.sleep(0.3)
        async with session.get(pod.admin_url + "/readyz") as resp:
            assert resp.status == 503  # routers are told to stop sending ...
        during = await stream_completion(session, pod.engine_url, 10, 5)
        assert during.ok, during.error  # ... while requests that still arrive are served
        await asyncio.sleep(1.6)
        after = await stream_completion(session, pod.engine_url, 10, 5)
    assert not after.ok
    assert await asyncio.to_thread(pod.wait, 30) == 0
