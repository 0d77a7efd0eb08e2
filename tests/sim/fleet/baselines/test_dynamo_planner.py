"""Dynamo's throughput-based SLA planner (baselines.md §3) on a disaggregated fleet."""

from __future__ import annotations

import math

from semipd.sim.fleet.baselines.disaggregated import disaggregated_pools
from semipd.sim.fleet.baselines.dynamo_planner import DynamoPlannerController, DynamoProfile
from semipd.sim.fleet.fleet import simulate
from semipd.traces import TraceRequest

from ..helpers import H200_8B, fleet, pool

PROFILE = DynamoProfile.sweep(H200_8B)


def test_profile_is_monotone() -> None:
    assert list(PROFILE.ttft) == sorted(PROFILE.ttft)
    assert PROFILE.decode_itl(1, 1000) < PROFILE.decode_itl(200, 1000)
    assert PROFILE.best_decode_throughput(0.02, 1000) < PROFILE.best_decode_throughput(0.1, 1000)


def test_planner_sizes_prefill_and_decode_from_throughput() -> None:
    base = fleet(pool(1, startup_s=20.0))
    setup = disaggregated_pools(base, 1, 1, prefill_bounds=(1, 8), decode_bounds=(1, 8))
    # 20 req/s of 4000-token prompts needs several whole-GPU prefill instances; 20 output tokens each
    # is light decode work.
    trace = [TraceRequest(0.05 * k, 4000, 20) for k in range(12000)]
    ctl = DynamoPlannerController(PROFILE, PROFILE, 1.0, 0.05, max_gpu_budget=8, interval_s=60.0)
    result = simulate(setup, trace, ctl)
    final = result.timeline[-1].replicas
    need_p = math.ceil(20 * 4000 / PROFILE.prefill_throughput(4000))
    assert final["prefill"][0] >= min(need_p, 7) - 1
    assert final["decode"][0] <= 2
    assert final["prefill"][0] + final["decode"][0] <= 8
    assert any(a.action == "SetReplicas" for a in result.actions)
