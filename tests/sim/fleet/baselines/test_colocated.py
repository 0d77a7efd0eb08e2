"""Co-located vLLM-style instances: chunked prefill shares iterations with decodes (interference)."""

from __future__ import annotations

import pytest

from semipd.sim.fleet.fleet import Simulator

from ..helpers import H200_8B, fleet, pool, reqs, run

M = H200_8B
W1 = M.decode_step_time(1, 0, 1.0)


def max_itl(sim: Simulator) -> float:
    """Upper bound of the highest fine ITL bucket observed (0.5 % wide)."""
    top = max(i for i, c in enumerate(sim.fine_itl.counts) if c)
    return sim.fine_itl.bounds[top]


def test_chunked_prefill_runs_in_chunks_at_full_share() -> None:
    sim = run(fleet(pool(kind="colocated", chunk_tokens=1024)), reqs((0.0, 2500, 3)))
    r = sim.requests[0]
    chunks = M.prefill_time([1024], 1.0) + M.prefill_time([1024], 1.0, [1024]) + M.prefill_time([452], 1.0, [2048])
    assert r.first_token == pytest.approx(chunks, rel=1e-12)
    assert r.finish == pytest.approx(chunks + M.decode_step_time(1, 2501, 1.0) + M.decode_step_time(1, 2502, 1.0))


def test_a_prefill_chunk_stalls_the_running_decode() -> None:
    # A decodes; B's 1000-token prompt arrives and rides along in one iteration with A's token.
    a_ttft = M.prefill_time([100], 1.0)
    t_b = a_ttft + 0.0001
    sim = run(fleet(pool(kind="colocated", chunk_tokens=1024)), reqs((0.0, 100, 400), (t_b, 1000, 2)))
    _a, b = sim.requests
    mixed = M.prefill_time([1000], 1.0) + max(0.0, M.decode_step_time(1, 102, 1.0) - W1)
    # B is admitted at A's next iteration boundary (the first decode step of A was already running).
    step1 = M.decode_step_time(1, 101, 1.0)
    assert b.first_token == pytest.approx(a_ttft + step1 + mixed, rel=1e-9)
    # A's inter-token gap during that iteration is the whole mixed iteration: far above a decode step.
    assert mixed > 5 * M.decode_step_time(1, 102, 1.0)
    assert max_itl(sim) == pytest.approx(mixed, rel=0.02)


def test_prefill_first_stalls_decodes_for_whole_prompts() -> None:
    a_ttft = M.prefill_time([100], 1.0)
    sim = run(fleet(pool(kind="colocated", chunked=False)), reqs((0.0, 100, 300), (a_ttft + 0.0001, 6000, 2)))
    _a, b = sim.requests
    step1 = M.decode_step_time(1, 101, 1.0)
    assert b.first_token == pytest.approx(a_ttft + step1 + M.prefill_time([6000], 1.0), rel=1e-9)
    # A's gap spanning B's prefill iteration is recorded as one inter-token latency.
    gap = M.prefill_time([6000], 1.0) + M.decode_step_time(2, 102 + 6001, 1.0)
    assert max_itl(sim) == pytest.approx(gap, rel=0.02)  # the stall is one inter-token gap
