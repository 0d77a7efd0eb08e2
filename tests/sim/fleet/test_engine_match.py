"""Component test: the fleet simulator's instance reproduces a real simulated-engine pod.

One pod (agent + decode owner + prefill worker processes on a loopback address, split 80/100) at
speedup 1.5 serves a fixed schedule of overlapping streaming requests; the same schedule replayed
through a one-instance fleet gives the same TTFT and end-to-end latency per request, in model
seconds. The engine runs in real time, so it is a little slower: HTTP and event-loop work per request
(REQUEST_WALL_S) plus up to 2 wall ms per decode iteration (at speedup 1 the two agree within
2-5 %). A semantic difference (uncontended prefill under a running decode, a missed batch) moves
these latencies by far more than that.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import aiohttp

from semipd.perf import LatencyModel
from semipd.sim.engine.localpod import LocalPod, PodOptions
from semipd.sim.engine.probe import StreamResult, stream_completion

from .helpers import fleet, pool, reqs, run

SPEEDUP = 1.5
REPLAYS = 3
REQUEST_WALL_S = 0.05
"""Wall seconds of HTTP, event-loop and process-hop work one request may add. 5 ms held on a quiet
machine; on this busy shared 2-core one the engine ran 11-36 wall ms behind the simulator per request
alone, and a lone 3000-token prompt 43 ms behind in the full suite, best of 3 replays (0.515 vs 0.450
model s). A semantic difference (uncontended prefill under a running decode, a missed batch) moves a
TTFT by hundreds of ms."""
MODEL = LatencyModel.from_names("h200", "qwen3-32b")
# (arrival model-s, prompt tokens, output tokens): a decode in progress when later prefills run,
# two prompts queueing behind one batch, and a lone request at the end.
SCHEDULE = [
    (0.0, 4096, 48),
    (0.3, 2048, 24),
    (0.35, 1024, 24),
    (1.6, 6000, 8),
    (2.4, 512, 64),
    (5.5, 3000, 16),
]


async def replay(pod: LocalPod) -> list[StreamResult]:
    async with aiohttp.ClientSession() as session:
        start = time.monotonic()

        async def one(at: float, prompt: int, out: int) -> StreamResult:
            await asyncio.sleep(max(0.0, start + at / SPEEDUP - time.monotonic()))
            return await stream_completion(session, pod.engine_url, prompt, out, timeout=60)

        return list(await asyncio.gather(*(one(*item) for item in SCHEDULE)))


async def test_fleet_instance_matches_a_real_engine_pod(pod_factory: Callable[..., LocalPod]) -> None:
    pod = pod_factory(PodOptions(model="qwen3-32b", hardware="h200", speedup=SPEEDUP, prefill_percent=80,
                                 decode_percent=100))  # fmt: skip
    async with aiohttp.ClientSession() as session:  # warm-up: first-connection costs stay out
        assert (await stream_completion(session, pod.engine_url, 16, 2)).ok
    sim = run(fleet(pool(model=MODEL, prefill_percent=80, decode_percent=100)), reqs(*SCHEDULE))
    want = [(r.ttft, r.finish - r.arrival) for r in sim.requests]
    # Wall-clock noise only ever adds, while a semantic difference shows in every replay: each request
    # is judged by its best of up to REPLAYS replays (the first that all pass ends it).
    best: list[tuple[float, float]] = []
    for _ in range(REPLAYS):
        measured = await replay(pod)
        assert all(r.ok for r in measured), [r.error for r in measured]
        got = [(r.ttft * SPEEDUP, r.e2e * SPEEDUP) for r in measured]
        best = [min(a, b) for a, b in zip(best, got, strict=True)] if best else got
        if not _misses(best, want):
            break
    assert not _misses(best, want), _misses(best, want)


def _misses(got: list[tuple[float, float]], want: list[tuple[float, float]]) -> list[str]:
    """The requests whose measured TTFT or end-to-end latency (model s) is off the simulator's."""
    out = []
    for (ttft, e2e), (want_ttft, want_e2e), (_, _, tokens) in zip(got, want, SCHEDULE, strict=True):
        slack = (REQUEST_WALL_S + 0.002 * tokens) * SPEEDUP  # wall overheads in model seconds
        if not 0.98 * want_ttft <= ttft <= 1.03 * want_ttft + REQUEST_WALL_S * SPEEDUP:
            out.append(f"TTFT {ttft:.4f} vs {want_ttft:.4f}")
        if not 0.98 * want_e2e <= e2e <= 1.03 * want_e2e + slack:
            out.append(f"e2e {e2e:.4f} vs {want_e2e:.4f}")
    return out
