"""The shipped planner in the loop: it sees simulated Prometheus, and its decisions take effect."""

from __future__ import annotations

from typing import Any

from semipd.api.v1alpha1 import InferencePoolSpec
from semipd.perf import ContentionModel
from semipd.sim.fleet.controller import StaticController
from semipd.sim.fleet.fleet import simulate
from semipd.sim.fleet.policy import PolicyController
from semipd.sim.fleet.setup import fleet_from_spec
from semipd.traces import prepare


def spec(mode: str = "semipd", lo: int = 1, hi: int = 4, prefill: int = 40) -> InferencePoolSpec:
    doc: dict[str, Any] = {
        "model": {"name": "m", "source": "hf://m/m", "profile": "llama-3-8b", "maxContextLength": 8192},
        "engine": {"kind": "sim"},
        "nodePools": [
            {
                "name": "h200",
                "accelerator": "nvidia",
                "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"},
                "minReplicas": lo,
                "maxReplicas": hi,
            },
        ],
        "semiPD": {"initialPrefillPercent": prefill, "minPrefillPercent": 20, "maxPrefillPercent": 100},
        "slo": {"ttftP99": "500ms", "itlP99": "40ms"},
        "autoscaling": {"mode": mode, "interval": "15s", "scaleDownStabilization": "2m"},
    }
    return InferencePoolSpec.model_validate(doc)


TRACE = prepare("azure-conv", context_length=8192, rate=22.0, duration_s=600)


def test_overload_past_the_best_split_scales_out_before_the_slo_breaks_and_moves_the_split() -> None:
    s = spec()
    result = simulate(fleet_from_spec(s), TRACE, PolicyController(s))
    kinds = {a.action for a in result.actions}
    assert {"SplitChange", "SplitDone", "ScaleOut"} <= kinds
    first_scale = min((a for a in result.actions if a.action == "ScaleOut"), key=lambda a: a.time)
    assert first_scale.reason == "SLOCapacityShort"  # model-sized, at the best split's capacity
    assert result.pools["h200"]["peak_replicas"] > 1
    off = simulate(fleet_from_spec(s), TRACE, StaticController("off"))
    assert result.attainment > off.attainment + 0.2


def test_split_first_when_the_best_split_carries_the_load() -> None:
    s = spec(prefill=30)
    trace = prepare("azure-conv", context_length=8192, rate=6.0, duration_s=400)
    result = simulate(fleet_from_spec(s), trace, PolicyController(s))
    assert [a.reason for a in result.actions if a.action == "SplitChange"][:1] == ["TTFTOverSLO"]
    assert not [a for a in result.actions if a.action == "ScaleOut"]
    assert result.attainment >= 0.98


def test_replicas_mode_never_moves_a_split() -> None:
    s = spec(mode="replicas")
    result = simulate(fleet_from_spec(s), TRACE, PolicyController(s))
    assert not [a for a in result.actions if a.action in ("SplitChange", "SetSplit", "SplitDone")]
    assert all(x == 40 for smp in result.timeline for x, _ in smp.splits.values())


def test_replicas_mode_scales_out_of_an_overload() -> None:
    s = spec(mode="replicas")
    result = simulate(fleet_from_spec(s), TRACE, PolicyController(s))
    assert any(a.action == "ScaleOut" for a in result.actions)


def test_fixed_replicas_split_only_reaches_for_ttft_headroom() -> None:
    s = spec(lo=2, hi=2, prefill=30)
    trace = prepare("azure-conv", context_length=8192, rate=14.0, duration_s=400)
    result = simulate(fleet_from_spec(s), trace, PolicyController(s))
    moves = [a for a in result.actions if a.action == "SplitChange"]
    assert moves
    assert all(a.reason == "TTFTOverSLO" for a in moves[:2])
    final = result.timeline[-1].splits
    assert all(x > 30 for x, _ in final.values())
    assert not [a for a in result.actions if a.action == "ScaleOut"]


def test_full_gpu_pool_falls_back_to_the_ascend_pool() -> None:
    doc: dict[str, Any] = {
        "model": {"name": "m", "source": "hf://m/m", "profile": "llama-3-8b", "maxContextLength": 8192},
        "engine": {"kind": "sim"},
        "nodePools": [
            {
                "name": "h200",
                "accelerator": "nvidia",
                "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"},
                "minReplicas": 1,
                "maxReplicas": 4,
                "costPerHour": 10.0,
            },
            {"name": "ascend", "accelerator": "ascend", "minReplicas": 0, "maxReplicas": 4, "costPerHour": 30.0},
        ],
        "semiPD": {"initialPrefillPercent": 40, "minPrefillPercent": 20, "maxPrefillPercent": 100},
        "slo": {"ttftP99": "1s", "itlP99": "60ms"},
        "autoscaling": {"interval": "15s", "pendingTimeout": "1m"},
    }
    s = InferencePoolSpec.model_validate(doc)
    # The GPU pool is cheaper per SLO capacity but has room for one replica only.
    setup = fleet_from_spec(s, capacity={"h200": 1})
    result = simulate(setup, TRACE, PolicyController(s))
    fallback = [a for a in result.actions if a.action == "PoolFallback"]
    assert fallback
    assert fallback[0].target == "h200"
    assert result.pools["ascend"]["peak_replicas"] >= 1
    assert result.pools["ascend"]["hardware"] == "ascend-910b3"
    assert result.pools["h200"]["replica_hours"] <= result.duration_s / 3600.0 + 1e-9  # never more than one


def test_restart_mode_changes_splits_one_pod_at_a_time_and_loses_nothing() -> None:
    doc = spec(lo=4, hi=4, prefill=30).model_dump(by_alias=True, exclude_none=True)
    doc["engine"] = {"kind": "sglang-semipd", "image": "example.com/semipd:1"}
    s = InferencePoolSpec.model_validate(doc)
    trace = prepare("azure-conv", context_length=8192, rate=8.0, duration_s=900)
    result = simulate(fleet_from_spec(s), trace, PolicyController(s))
    done = [a for a in result.actions if a.action == "SplitDone"]
    assert done, "the load needs a different split: restart-mode changes must happen"
    assert result.rejected == {}, "no request lost to a split change (or anything else)"
    # One pod per node pool at a time: never more than one pod out of Ready for a split change.
    assert all(ready >= members - 1 for smp in result.timeline for _, members, ready in smp.replicas.values())


def test_a_contention_prior_replaces_only_the_planners_contention() -> None:
    s = spec()
    shipped = PolicyController(s).contexts["h200"]
    calibrated = PolicyController(s, prior=ContentionModel(0.5, 0.15, 0.1)).contexts["h200"]
    assert shipped.model.contention.take_turns
    assert calibrated.model.contention == ContentionModel(0.5, 0.15, 0.1)
    assert calibrated.model.model == shipped.model.model
    assert calibrated.model.hardware == shipped.model.hardware
    assert (calibrated.split_cost_s, calibrated.itl_buckets) == (shipped.split_cost_s, shipped.itl_buckets)
