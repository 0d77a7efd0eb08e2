"""200 split switches under continuous streaming load: no request fails, no token is lost."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from semipd.sim.engine.localpod import LocalPod, PodOptions
from semipd.sim.engine.probe import StreamResult, stream_completion

SWITCHES = 200
CLIENTS = 4
PREFILL_CYCLE = (30, 50, 70, 90)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(text: str, name: str, default: float | None = None, **labels: str) -> float:
    """A sample's value; `default` for a labelled series that was never touched (so not exposed)."""
    found = samples(text).get((name, tuple(sorted(labels.items()))), default)
    assert found is not None, f"{name}{labels} missing"
    return found


@pytest.mark.slow
async def test_200_switches_under_streaming_load_lose_nothing(pod_factory: Callable[..., LocalPod]) -> None:
    pod = pod_factory(PodOptions(speedup=100.0, prefill_percent=50, decode_percent=100))
    results: list[StreamResult] = []
    in_flight = 0
    in_flight_at_switch: list[int] = []
    durations: list[float] = []
    stop = asyncio.Event()
    deadline = time.monotonic() + 240

    async def client(i: int) -> None:
        nonlocal in_flight
        rng = random.Random(i)
        async with aiohttp.ClientSession() as session:
            while not stop.is_set() and time.monotonic() < deadline:
                in_flight += 1
                try:
                    result = await stream_completion(
                        session, pod.engine_url, rng.randint(16, 3000), rng.randint(4, 48), chat=i % 2 == 1
                    )
                finally:
                    in_flight -= 1
                results.append(result)

    async def switcher() -> None:
        for n in range(SWITCHES):
            prefill = PREFILL_CYCLE[n % len(PREFILL_CYCLE)]
            decode = 100 if (n // 4) % 2 == 0 else 90
            in_flight_at_switch.append(in_flight)
            status, body = await asyncio.to_thread(pod.put_split, prefill, decode)
            assert status == 200, (n, body, pod.log_tail())
            assert body["changed"] is True
            assert (body["prefillPercent"], body["decodePercent"]) == (prefill, decode)
            durations.append(body["durationSeconds"])

    clients = [asyncio.ensure_future(client(i)) for i in range(CLIENTS)]
    await asyncio.sleep(0.5)
    try:
        await asyncio.wait_for(switcher(), timeout=240)
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*clients), timeout=60)

    failed = [r for r in results if not r.ok]
    assert failed == [], failed[:5]
    assert len(results) > SWITCHES, "load must keep running across the switches"
    # The switches really happened under load: requests were in flight for nearly all of them.
    assert sum(1 for n in in_flight_at_switch if n > 0) >= 0.95 * SWITCHES

    # Every request and every token the clients received is also what the engine counted.
    engine = pod.engine_metrics_text()
    assert value(engine, "sglang:num_requests_total", model_name="llama-3-8b") == len(results)
    assert value(engine, "sglang:generation_tokens_total", model_name="llama-3-8b") == sum(r.tokens for r in results)
    assert value(engine, "semipd_sim_aborted_requests_total", 0.0, model_name="llama-3-8b") == 0
    last_prefill = PREFILL_CYCLE[(SWITCHES - 1) % len(PREFILL_CYCLE)]
    last_decode = 100 if ((SWITCHES - 1) // 4) % 2 == 0 else 90
    assert value(engine, "semipd_sim_prefill_share_ratio") == last_prefill / 100
    assert value(engine, "semipd_sim_decode_share_ratio") == last_decode / 100

    agent = pod.metrics_text()
    assert value(agent, "semipd_agent_switches_total") == SWITCHES
    assert value(agent, "semipd_agent_failed_switches_total") == 0
    assert value(agent, "semipd_agent_switch_duration_seconds_count") == SWITCHES
    assert value(agent, "semipd_agent_prefill_share_ratio") == last_prefill / 100
    assert value(agent, "semipd_agent_decode_share_ratio") == last_decode / 100
    assert value(agent, "semipd_agent_worker_restarts_total") == 0

    status, split = pod.admin("GET", "/v1/split")
    assert status == 200
    # Exactly one prefill worker is left: every old one was drained and stopped.
    assert [w["percent"] for w in split["workers"]] == [last_prefill]
    assert len(pod.pids()["workers"]) == 1
    assert min(durations) > 0
