"""KV-cache placement policy: capacity per replica, long-context pool choice, weights, hysteresis, fail-static."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semipd.api.v1alpha1 import InferencePoolSpec, KVCachePlacementStatus
from semipd.perf import LatencyModel, ModelFitError
from semipd.policy.kvcache import (
    REASON_KEPT,
    REASON_MOVED,
    REASON_NO_READY_REPLICAS,
    REASON_POLICY_OFF,
    REASON_SELECTED,
    REASON_THRESHOLD_AT_MAX_CONTEXT,
    REASON_USAGE_UNKNOWN,
    REASON_WITHIN_HYSTERESIS,
    KVPoolObservation,
    kv_capacity_tokens,
    plan_kv_placement,
    steers,
)

T0 = "2025-01-01T00:00:00Z"
T1 = "2025-01-01T00:00:15Z"
T2 = "2025-01-01T00:00:30Z"

H200_CAP = LatencyModel.from_names("h200", "llama-3-8b").kv_capacity_tokens()
ASCEND_CAP = LatencyModel.from_names("ascend-910b3", "llama-3-8b").kv_capacity_tokens()


def spec(kv: dict[str, Any] | None = None, max_context: int = 131072, pools: list[dict[str, Any]] | None = None) -> Any:
    doc: dict[str, Any] = {
        "model": {"name": "m", "source": "hf://m/m", "maxContextLength": max_context, "profile": "llama-3-8b"},
        "engine": {"kind": "sim"},
        "nodePools": pools
        or [
            {"name": "h200", "accelerator": "nvidia", "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"}},
            {"name": "ascend", "accelerator": "ascend", "nodeSelector": {"node.kubernetes.io/npu.chip.name": "910B3"}},
        ],
        "slo": {"ttftP99": "1s", "itlP99": "60ms"},
        "placement": {"kvCache": kv or {}},
    }
    return InferencePoolSpec.model_validate(doc)


def obs(**pools: tuple[int, float | None]) -> dict[str, KVPoolObservation]:
    return {name: KVPoolObservation(name, ready, usage) for name, (ready, usage) in pools.items()}


def by_name(status: KVCachePlacementStatus) -> dict[str, Any]:
    return {p.name: p for p in status.pools}


# --------------------------------------------------------------------------- capacity


def test_capacity_comes_from_the_latency_model_per_hardware() -> None:
    s = spec()
    assert kv_capacity_tokens(s, s.node_pool("h200")) == H200_CAP
    assert kv_capacity_tokens(s, s.node_pool("ascend")) == ASCEND_CAP
    # (141 GB x 0.9 - 16.06 GB of Llama-3-8B weights) / 128 KiB per token
    assert int((141e9 * 0.9 - 8.03e9 * 2) // 131072) == H200_CAP
    assert int((64e9 * 0.9 - 8.03e9 * 2) // 131072) == ASCEND_CAP


def test_capacity_override_and_tensor_parallel() -> None:
    pools = [
        {"name": "a", "accelerator": "nvidia", "kvCacheTokens": 12345},
        {
            "name": "b",
            "accelerator": "nvidia",
            "acceleratorsPerReplica": 2,
            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"},
        },
    ]
    s = spec(pools=pools)
    assert kv_capacity_tokens(s, s.node_pool("a")) == 12345
    # TP2 halves the weights and the KV heads per device: more than twice the tokens of TP1.
    assert (
        kv_capacity_tokens(s, s.node_pool("b")) == LatencyModel.from_names("h200", "llama-3-8b", 2).kv_capacity_tokens()
    )
    assert kv_capacity_tokens(s, s.node_pool("b")) > 2 * H200_CAP


def test_capacity_of_a_model_that_does_not_fit_is_a_clear_error() -> None:
    s = spec().model_copy(deep=True)
    s = InferencePoolSpec.model_validate(
        {**s.model_dump(by_alias=True), "model": {**s.model.model_dump(by_alias=True), "profile": "qwen3-32b"}}
    )
    with pytest.raises(ModelFitError, match="qwen3-32b needs"):
        kv_capacity_tokens(s, s.node_pool("ascend"))


# --------------------------------------------------------------------------- choice and weights


def test_long_prompts_go_to_the_pool_with_most_headroom_per_replica() -> None:
    s = spec()
    status = plan_kv_placement(s, obs(h200=(2, 0.5), ascend=(4, 0.1)), None, T0)
    assert status.reason == REASON_SELECTED
    assert status.long_context_pools == ["h200"]  # 0.5 x 845k > 0.9 x 317k
    pools = by_name(status)
    assert pools["h200"].context_range == "0-131072"
    assert pools["ascend"].context_range == "0-32768"
    assert pools["h200"].long_weight == 100
    assert pools["ascend"].long_weight == 0
    # Short prompts everywhere, in proportion to total capacity (2 x 845k vs 4 x 317k).
    expected_h200 = 100 * 2 * H200_CAP / (2 * H200_CAP + 4 * ASCEND_CAP)
    assert abs(pools["h200"].short_weight - expected_h200) < 1
    assert pools["h200"].short_weight + pools["ascend"].short_weight == 100
    assert pools["h200"].headroom_tokens == round(H200_CAP * 0.5)
    assert pools["h200"].capacity_tokens == H200_CAP
    assert status.last_change == T0
    assert steers(status)
    assert "h200 2 ready, headroom" in status.message
    assert "usage 50.0%" in status.message


def test_a_full_big_pool_loses_long_prompts_to_an_emptier_small_one() -> None:
    status = plan_kv_placement(spec(), obs(h200=(2, 0.8), ascend=(2, 0.1)), None, T0)
    assert status.long_context_pools == ["ascend"]  # 0.2 x 845k = 169k < 0.9 x 317k = 285k
    assert by_name(status)["ascend"].long_weight == 100


def test_pools_within_the_band_share_long_prompts_by_capacity() -> None:
    pools = [
        {"name": "a", "accelerator": "nvidia", "kvCacheTokens": 100_000},
        {"name": "b", "accelerator": "nvidia", "kvCacheTokens": 100_000},
        {"name": "c", "accelerator": "nvidia", "kvCacheTokens": 100_000},
    ]
    s = spec(pools=pools, kv={"hysteresis": 0.1})
    status = plan_kv_placement(s, obs(a=(1, 0.20), b=(3, 0.25), c=(1, 0.5)), None, T0)
    assert status.long_context_pools == ["a", "b"]
    w = by_name(status)
    assert (w["a"].long_weight, w["b"].long_weight, w["c"].long_weight) == (25, 75, 0)
    assert (w["a"].short_weight, w["b"].short_weight, w["c"].short_weight) == (20, 60, 20)


def test_pools_without_ready_replicas_get_no_weight() -> None:
    status = plan_kv_placement(spec(), obs(h200=(0, None), ascend=(3, 0.9)), None, T0)
    assert status.long_context_pools == ["ascend"]
    w = by_name(status)
    assert (w["h200"].short_weight, w["h200"].long_weight) == (0, 0)
    assert (w["ascend"].short_weight, w["ascend"].long_weight) == (100, 100)
    assert w["h200"].usage is None
    assert w["h200"].headroom_tokens is None


def test_a_missing_pool_counts_as_not_ready() -> None:
    status = plan_kv_placement(spec(), obs(ascend=(1, 0.2)), None, T0)
    assert by_name(status)["h200"].short_weight == 0
    assert status.long_context_pools == ["ascend"]


def test_no_ready_replicas_anywhere() -> None:
    status = plan_kv_placement(spec(), obs(h200=(0, None), ascend=(0, 0.3)), None, T0)
    assert status.reason == REASON_NO_READY_REPLICAS
    assert status.long_context_pools == []
    assert all(p.short_weight == 0 and p.long_weight == 0 for p in status.pools)
    assert not steers(status)


# --------------------------------------------------------------------------- no steering


def test_policy_off_does_not_steer() -> None:
    status = plan_kv_placement(spec(kv={"policy": "off"}), obs(h200=(1, 0.9), ascend=(1, 0.0)), None, T0)
    assert status.reason == REASON_POLICY_OFF
    assert not steers(status)
    assert status.long_context_pools == ["h200", "ascend"]
    for p in status.pools:
        assert p.context_range == "0-131072"
        assert p.long_weight == p.short_weight


def test_threshold_at_max_context_does_not_steer() -> None:
    s = spec(kv={"longContextThreshold": 32768}, max_context=32768)
    status = plan_kv_placement(s, obs(h200=(1, 0.9), ascend=(1, 0.0)), None, T0)
    assert status.reason == REASON_THRESHOLD_AT_MAX_CONTEXT
    assert "32768 >= model.maxContextLength 32768" in status.message
    assert {p.context_range for p in status.pools} == {"0-32768"}


def test_turning_steering_on_selects_fresh() -> None:
    off = plan_kv_placement(spec(kv={"policy": "off"}), obs(h200=(1, 0.1), ascend=(1, 0.0)), None, T0)
    on = plan_kv_placement(spec(), obs(h200=(1, 0.1), ascend=(1, 0.0)), off, T1)
    assert on.reason == REASON_SELECTED
    assert on.long_context_pools == ["h200"]
    assert on.last_change == T1


# --------------------------------------------------------------------------- hysteresis and fail-static


def test_hysteresis_keeps_the_current_pool_inside_the_band() -> None:
    s = spec(kv={"hysteresis": 0.1})
    first = plan_kv_placement(s, obs(h200=(1, 0.5), ascend=(1, 0.1)), None, T0)
    assert first.long_context_pools == ["h200"]
    # h200 headroom 0.68 x 845k = 575k; ascend 317k: still h200 and lastChange kept.
    kept = plan_kv_placement(s, obs(h200=(1, 0.32), ascend=(1, 0.0)), first, T1)
    assert kept.reason == REASON_KEPT
    assert kept.last_change == T0


def test_hysteresis_band_then_move() -> None:
    pools = [
        {"name": "a", "accelerator": "nvidia", "kvCacheTokens": 100_000},
        {"name": "b", "accelerator": "nvidia", "kvCacheTokens": 200_000},
    ]
    s = spec(pools=pools, kv={"hysteresis": 0.1})
    first = plan_kv_placement(s, obs(a=(1, 0.0), b=(1, 0.65)), None, T0)  # a 100k, b 70k
    assert first.long_context_pools == ["a"]
    # b 108k beats a's 100k, but by less than 0.1 x a's 100k capacity.
    held = plan_kv_placement(s, obs(a=(1, 0.0), b=(1, 0.46)), first, T1)
    assert held.reason == REASON_WITHIN_HYSTERESIS
    assert held.long_context_pools == ["a"]
    assert held.last_change == T0
    moved = plan_kv_placement(s, obs(a=(1, 0.0), b=(1, 0.4)), held, T2)  # b 120k > 100k + 10k
    assert moved.reason == REASON_MOVED
    assert moved.long_context_pools == ["b"]
    assert moved.last_change == T2
    assert "move from a to b" in moved.message


def test_zero_hysteresis_follows_the_best_pool() -> None:
    pools = [
        {"name": "a", "accelerator": "nvidia", "kvCacheTokens": 100_000},
        {"name": "b", "accelerator": "nvidia", "kvCacheTokens": 100_000},
    ]
    s = spec(pools=pools, kv={"hysteresis": 0.0})
    first = plan_kv_placement(s, obs(a=(1, 0.3), b=(1, 0.31)), None, T0)
    assert first.long_context_pools == ["a"]
    assert plan_kv_placement(s, obs(a=(1, 0.31), b=(1, 0.3)), first, T1).long_context_pools == ["b"]


def test_a_long_pool_that_loses_its_replicas_moves() -> None:
    s = spec()
    first = plan_kv_placement(s, obs(h200=(1, 0.0), ascend=(1, 0.0)), None, T0)
    moved = plan_kv_placement(s, obs(h200=(0, None), ascend=(1, 0.5)), first, T1)
    assert moved.reason == REASON_MOVED
    assert moved.long_context_pools == ["ascend"]
    assert "h200 lost its ready replicas" in moved.message


def test_unknown_usage_keeps_the_current_placement() -> None:
    s = spec()
    first = plan_kv_placement(s, obs(h200=(1, 0.9), ascend=(1, 0.0)), None, T0)
    assert first.long_context_pools == ["ascend"]
    held = plan_kv_placement(s, obs(h200=(1, 0.0), ascend=(1, None)), first, T1)
    assert held.reason == REASON_USAGE_UNKNOWN
    assert held.long_context_pools == ["ascend"]
    assert held.last_change == T0
    assert steers(held)
    assert "usage unknown for ascend" in held.message


def test_unknown_usage_without_a_placement_does_not_steer_long_prompts() -> None:
    status = plan_kv_placement(spec(), obs(h200=(1, None), ascend=(1, 0.2)), None, T0)
    assert status.reason == REASON_USAGE_UNKNOWN
    assert status.long_context_pools == ["h200", "ascend"]
    assert {p.context_range for p in status.pools} == {"0-131072"}


def test_long_request_share_is_weighted_by_ready_replicas() -> None:
    o = {
        "h200": KVPoolObservation("h200", 3, 0.2, long_share=0.4),
        "ascend": KVPoolObservation("ascend", 1, 0.2, long_share=0.0),
    }
    status = plan_kv_placement(spec(), o, None, T0)
    assert status.long_request_share == pytest.approx(0.3)
    assert "long prompts 30.0%" in status.message
    assert plan_kv_placement(spec(), obs(h200=(1, 0.2)), None, T0).long_request_share is None


# --------------------------------------------------------------------------- bad input


def test_bad_observations_are_rejected() -> None:
    with pytest.raises(ValueError, match="usage must be a fraction"):
        KVPoolObservation("a", 1, 1.5)
    with pytest.raises(ValueError, match="usage must be a fraction"):
        KVPoolObservation("a", 1, float("nan"))
    with pytest.raises(ValueError, match="ready_replicas"):
        KVPoolObservation("a", -1, 0.1)
    with pytest.raises(ValueError, match="not in the spec"):
        plan_kv_placement(spec(), obs(gpu=(1, 0.1)), None, T0)
    with pytest.raises(ValueError, match="keyed 'h200'"):
        plan_kv_placement(spec(), {"h200": KVPoolObservation("ascend", 1, 0.1)}, None, T0)


# --------------------------------------------------------------------------- properties

CAPACITIES = [50_000, 120_000, 300_000, 850_000]


def _spec_for(caps: list[int], hysteresis: float) -> InferencePoolSpec:
    pools = [{"name": f"p{i}", "accelerator": "nvidia", "kvCacheTokens": c} for i, c in enumerate(caps)]
    return spec(pools=pools, kv={"hysteresis": hysteresis})


pool_obs = st.tuples(st.integers(0, 5), st.one_of(st.none(), st.floats(0.0, 1.0)))


@settings(max_examples=200, deadline=None)
@given(
    caps=st.lists(st.sampled_from(CAPACITIES), min_size=1, max_size=4),
    rounds=st.lists(st.lists(pool_obs, min_size=4, max_size=4), min_size=1, max_size=6),
    hysteresis=st.sampled_from([0.0, 0.05, 0.1, 0.3]),
)
def test_weights_sum_to_100_and_skip_unready_pools(
    caps: list[int], rounds: list[list[tuple[int, float | None]]], hysteresis: float
) -> None:
    s = _spec_for(caps, hysteresis)
    current = None
    for t, row in enumerate(rounds):
        o = {f"p{i}": KVPoolObservation(f"p{i}", r, u) for i, (r, u) in enumerate(row[: len(caps)])}
        status = plan_kv_placement(s, o, current, f"t{t}")
        ready = {name for name, x in o.items() if x.ready_replicas > 0}
        w = by_name(status)
        if ready:
            assert sum(p.short_weight for p in status.pools) == 100
            assert sum(p.long_weight for p in status.pools) == 100
        for name in w:
            if name not in ready:
                assert w[name].short_weight == 0
                assert w[name].long_weight == 0
        assert set(status.long_context_pools) <= ready
        assert status.long_context_pools or not ready
        # Identical inputs give the identical placement.
        assert plan_kv_placement(s, o, current, f"t{t}") == status
        current = status


@settings(max_examples=300, deadline=None)
@given(
    caps=st.tuples(st.sampled_from(CAPACITIES), st.sampled_from(CAPACITIES)),
    base=st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 1.0)),
    jitter=st.lists(st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 1.0)), min_size=2, max_size=12),
    hysteresis=st.sampled_from([0.05, 0.1, 0.2]),
)
def test_hysteresis_prevents_flapping(
    caps: tuple[int, int], base: tuple[float, float], jitter: list[tuple[float, float]], hysteresis: float
) -> None:
    """Two pools whose usages wander within a band of width `hysteresis`: the long pools move at most once.

    Moving a -> b needs H_b - H_a > h c_a and moving back needs H_a - H_b > h c_b; with each usage
    inside a width-h interval, H_a - H_b spans less than h (c_a + c_b), so no round trip fits.
    """
    s = _spec_for(list(caps), hysteresis)
    current = None
    changes = 0
    for t, (ja, jb) in enumerate(jitter):
        ua = min(1.0, base[0] + ja * hysteresis * 0.999)
        ub = min(1.0, base[1] + jb * hysteresis * 0.999)
        o = {"p0": KVPoolObservation("p0", 1, ua), "p1": KVPoolObservation("p1", 1, ub)}
        status = plan_kv_placement(s, o, current, f"t{t}")
        if current is not None and status.long_context_pools != current.long_context_pools:
            changes += 1
            assert status.last_change == f"t{t}"
        elif current is not None:
            assert status.last_change == current.last_change
        current = status
    assert changes <= 1


@settings(max_examples=200, deadline=None)
@given(
    caps=st.lists(st.sampled_from(CAPACITIES), min_size=2, max_size=4),
    rounds=st.lists(st.lists(st.floats(0.0, 1.0), min_size=4, max_size=4), min_size=2, max_size=8),
    hysteresis=st.sampled_from([0.0, 0.05, 0.1, 0.3]),
)
def test_moves_only_past_the_band(caps: list[int], rounds: list[list[float]], hysteresis: float) -> None:
    """The long pools change iff some pool's headroom beats a long pool's by more than hysteresis x its capacity."""
    s = _spec_for(caps, hysteresis)
    current = None
    for t, row in enumerate(rounds):
        o = {f"p{i}": KVPoolObservation(f"p{i}", 1, row[i]) for i in range(len(caps))}
        status = plan_kv_placement(s, o, current, f"t{t}")
        if current is not None:
            headroom = {f"p{i}": caps[i] * (1 - row[i]) for i in range(len(caps))}
            best = max(headroom.values())
            beaten = any(best > headroom[m] + hysteresis * caps[int(m[1:])] for m in current.long_context_pools)
            assert (status.long_context_pools != current.long_context_pools) == beaten
            assert status.reason == (REASON_MOVED if beaten else status.reason)
        current = status


@settings(max_examples=100, deadline=None)
@given(
    caps=st.lists(st.sampled_from(CAPACITIES), min_size=1, max_size=4),
    usages=st.lists(st.floats(0.0, 1.0), min_size=4, max_size=4),
    hysteresis=st.sampled_from([0.0, 0.1]),
)
def test_fresh_choice_has_the_most_headroom(caps: list[int], usages: list[float], hysteresis: float) -> None:
    s = _spec_for(caps, hysteresis)
    o = {f"p{i}": KVPoolObservation(f"p{i}", 1, usages[i]) for i in range(len(caps))}
    status = plan_kv_placement(s, o, None, "t0")
    headroom = {f"p{i}": c * (1 - usages[i]) for i, c in enumerate(caps)}
    best = max(headroom.values())
    assert any(headroom[n] == best for n in status.long_context_pools)
    for n in status.long_context_pools:
        assert best - headroom[n] <= hysteresis * caps[int(n[1:])] + 1e-6
