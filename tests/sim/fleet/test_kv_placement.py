"""KV-cache admission (wait bound) and KV-cache placement in the fleet simulator: the router honours the
placement `plan_kv_placement` publishes, re-planned from scraped KV usage."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest

from semipd.api.v1alpha1 import InferencePoolSpec
from semipd.policy.kvcache import KVPoolObservation, plan_kv_placement
from semipd.sim.fleet.accounting import build_result
from semipd.sim.fleet.fleet import Simulator
from semipd.sim.fleet.requests import SimRequest
from semipd.sim.fleet.router import KVRouting, KVSteering, parse_range
from semipd.sim.fleet.setup import fleet_from_spec
from semipd.traces import TraceRequest

from .helpers import H200_8B, fleet, pool, reqs, run

M = H200_8B


# --------------------------------------------------------------------------- KV admission


def test_a_request_blocked_on_kv_is_rejected_at_its_wait_bound() -> None:
    # A holds 1400 of 1800 tokens for 400 decode steps (> 1 s); B (600) cannot fit, waits 0.5 s, is rejected.
    sim = run(fleet(pool(kv_capacity=1800, kv_wait_s=0.5)), reqs((0.0, 1000, 400), (0.001, 300, 300), (0.6, 10, 5)))
    a, b, c = sim.requests
    assert a.finish > 0.6
    assert b.rejected == "kv-wait"
    assert not b.done
    assert math.isnan(b.dispatch)
    # C fits beside A: once B is gone, nothing blocks the queue head.
    assert c.done
    assert c.dispatch == pytest.approx(0.6)


def test_the_wait_bound_survives_rounding() -> None:
    # (0.03 + 0.3) - 0.03 < 0.3 in floating point: the timer fires one ulp "early" and must still reject
    # (it used to re-arm itself at the same instant forever).
    assert (0.03 + 0.3) - 0.03 < 0.3
    sim = run(fleet(pool(kv_capacity=1800, kv_wait_s=0.3)), reqs((0.0, 1000, 400), (0.03, 300, 300)))
    assert sim.requests[1].rejected == "kv-wait"
    assert sim.events < 1000


def test_a_request_that_fits_before_its_bound_is_served() -> None:
    sim = run(fleet(pool(kv_capacity=1500, kv_wait_s=60.0)), reqs((0.0, 1000, 100), (0.001, 300, 300)))
    a, b = sim.requests
    assert not b.rejected
    assert b.dispatch == pytest.approx(a.finish)


def test_without_a_bound_the_queue_waits_forever() -> None:
    sim = run(fleet(pool(kv_capacity=1500)), reqs((0.0, 1000, 100), (0.001, 300, 300)))
    assert not sim.requests[1].rejected


def test_fleet_wide_bound_applies_to_every_pool() -> None:
    sim = run(fleet(pool(kv_capacity=1800), kv_wait_s=0.5), reqs((0.0, 1000, 400), (0.001, 300, 300)))
    assert sim.requests[1].rejected == "kv-wait"
    assert build_result(sim, "x", 0.0, 0.0, 0.0).kv_rejections == 1


# --------------------------------------------------------------------------- router steering


@dataclass
class Inst:
    name: str
    pool: str
    outstanding: int = 0


def req(tokens: int) -> SimRequest:
    return SimRequest(0, TraceRequest(0.0, tokens, 10))


def spec(policy: str = "headroom", big: int = 400_000, small: int = 100_000, **kv: Any) -> InferencePoolSpec:
    return InferencePoolSpec.model_validate(
        {
            "model": {"name": "m", "source": "hf://m/m", "profile": "llama-3-8b", "maxContextLength": 65536},
            "engine": {"kind": "sim"},
            "nodePools": [
                {"name": "big", "accelerator": "nvidia", "kvCacheTokens": big, "minReplicas": 2, "maxReplicas": 2},
                {"name": "small", "accelerator": "nvidia", "kvCacheTokens": small, "minReplicas": 2, "maxReplicas": 2},
            ],
            # Semi-PD's start split: the traces below were sized for its decode speed.
            "semiPD": {"initialPrefillPercent": 80, "initialDecodePercent": 100},
            "slo": {"ttftP99": "5s", "itlP99": "100ms"},
            "autoscaling": {"mode": "off", "interval": "5s"},
            "placement": {"kvCache": {"policy": policy, "longContextThreshold": 8192, **kv}},
        }
    )


def placement(policy: str = "headroom") -> Any:
    o = {"big": KVPoolObservation("big", 2, 0.1), "small": KVPoolObservation("small", 2, 0.1)}
    return plan_kv_placement(spec(policy), o, None, "t0")


INSTANCES = [Inst("b0", "big"), Inst("b1", "big"), Inst("s0", "small"), Inst("s1", "small")]


def test_labels_send_long_prompts_only_to_long_context_pools() -> None:
    steer = KVSteering(KVRouting.LABELS)
    steer.update(placement())
    assert {i.pool for i in steer.candidates(req(20_000), INSTANCES)} == {"big"}  # type: ignore[arg-type]
    assert len(steer.candidates(req(8192), INSTANCES)) == 4  # type: ignore[arg-type]
    # No instance in range: fall back to every admissible one (a scorer, not a hard wall).
    only_small = INSTANCES[2:]
    assert steer.candidates(req(20_000), only_small) == only_small  # type: ignore[arg-type]


def test_weights_split_each_class_by_its_pool_weights() -> None:
    status = placement()
    weights = {p.name: (p.short_weight, p.long_weight) for p in status.pools}
    assert weights == {"big": (80, 100), "small": (20, 0)}
    steer = KVSteering(KVRouting.WEIGHTS)
    steer.update(status)
    short = Counter(steer.candidates(req(100), INSTANCES)[0].pool for _ in range(100))  # type: ignore[arg-type]
    long = Counter(steer.candidates(req(30_000), INSTANCES)[0].pool for _ in range(50))  # type: ignore[arg-type]
    assert short == {"big": 80, "small": 20}
    assert long == {"big": 50}


def test_a_placement_that_does_not_steer_is_ignored() -> None:
    for mode in KVRouting:
        steer = KVSteering(mode)
        steer.update(placement("off"))
        assert steer.candidates(req(30_000), INSTANCES) == INSTANCES  # type: ignore[arg-type]
        steer.update(None)
        assert steer.candidates(req(30_000), INSTANCES) == INSTANCES  # type: ignore[arg-type]


def test_context_range_labels_parse_strictly() -> None:
    assert parse_range("0-131072") == (0, 131072)
    for bad in ("", "0", "a-b", "5-1", "-1-3"):
        with pytest.raises(ValueError, match="context range"):
            parse_range(bad)


# --------------------------------------------------------------------------- simulated operator + router


def trace(n: int = 80, every: float = 0.25, output: int = 200) -> list[TraceRequest]:
    # Every fourth prompt is long (20k > the 8192 threshold).
    return [TraceRequest(k * every, 20_000 if k % 4 == 0 else 2_000, output) for k in range(n)]


def test_fleet_from_spec_sizes_instances_from_the_kv_capacity() -> None:
    setup = fleet_from_spec(spec())
    assert setup.pool("big").instance.kv_capacity == 400_000
    assert setup.pool("small").instance.kv_capacity == 100_000
    assert setup.kv_spec is not None


def test_long_prompts_land_on_the_long_context_pool_and_short_ones_everywhere() -> None:
    sim = Simulator(fleet_from_spec(spec()))
    sim.run(trace())
    long_pools = Counter(r.instance.pool for r in sim.requests if r.input > 8192)
    short_pools = Counter(r.instance.pool for r in sim.requests if r.input <= 8192)
    assert set(long_pools) == {"big"}
    assert set(short_pools) == {"big", "small"}
    status = sim.kv_status
    assert status is not None
    assert status.long_context_pools == ["big"]
    assert sim.kv_log[0].long_context_pools == ("big",)
    # The plan saw the scraped usage and the long-prompt mix the router produced.
    assert status.long_request_share is not None
    assert 0.0 < status.long_request_share < 1.0


def test_without_placement_the_router_ignores_context_length() -> None:
    sim = Simulator(fleet_from_spec(spec("off")))
    sim.run(trace())
    assert {r.instance.pool for r in sim.requests if r.input > 8192} == {"big", "small"}
    assert sim.kv_status is not None
    assert sim.kv_status.reason == "PolicyOff"
    assert sim.kv_log == []


def kv_log(hysteresis: float) -> list[Any]:
    sim = Simulator(fleet_from_spec(spec(big=200_000, small=150_000, hysteresis=hysteresis)))
    sim.run(trace(300, 0.1, output=1000))
    return sim.kv_log


def test_placement_moves_when_the_long_pool_fills() -> None:
    # Long prompts fill the big pool's KV until the small pool's headroom passes the band: they move.
    log = kv_log(0.1)
    assert [(k.long_context_pools, k.reason) for k in log] == [
        (("big",), "LongContextPoolsSelected"),
        (("small",), "LongContextPoolsMoved"),
    ]
    assert log[1].long_weights == {"big": 0, "small": 100}
    assert "move from big to small" in log[1].message


def test_hysteresis_damps_flapping_in_the_loop() -> None:
    # Without a band the long prompts chase the headroom they just used up, every scrape.
    assert len(kv_log(0.0)) >= 2 * len(kv_log(0.1))
    # A wide band takes both pools from the start (150k is within 0.5 x 150k of 200k) and never moves.
    assert [k.long_context_pools for k in kv_log(0.5)] == [("big", "small")]
