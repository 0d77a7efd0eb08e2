"""The simulated engine's expert map in force: validation, device-load counters across a switch, metrics."""

from __future__ import annotations

import numpy as np
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from semipd.perf.moe import layer_hit_probabilities
from semipd.policy.experts.improved import rebalance_experts_improved
from semipd.policy.experts.metrics import device_loads, max_over_mean, sglang_balancedness
from semipd.sim.engine.experts import ExpertPlacement, PlacementError, StaleVersion
from semipd.sim.engine.metrics import EngineMetrics

LAYERS, EXPERTS, K, DEVICES, REDUNDANT = 4, 16, 2, 4, 4
SLOTS = EXPERTS + REDUNDANT


@pytest.fixture
def hits() -> list[list[float]]:
    return layer_hit_probabilities(LAYERS, EXPERTS, K, 1.4, seed=5)


def improved_map(hits: list[list[float]]) -> np.ndarray:
    return rebalance_experts_improved(np.asarray(hits), SLOTS, 1, 1, DEVICES).phy2log


def test_starts_with_sglang_trivial_map_and_its_device_load(hits: list[list[float]]) -> None:
    p = ExpertPlacement(hits, DEVICES, REDUNDANT)
    assert p.version == 0
    assert p.phy2log.shape == (LAYERS, SLOTS)
    assert p.phy2log[0].tolist() == [s % EXPERTS for s in range(SLOTS)]
    expected = device_loads(np.asarray(hits), p.phy2log, DEVICES)
    assert np.allclose(p.share, expected)
    # Each token makes K expert visits in every layer, wherever they land.
    assert np.allclose(p.share.sum(axis=1), K)
    assert p.balancedness() == pytest.approx(sglang_balancedness(expected))
    assert p.worst_max_over_mean() == pytest.approx(float(max_over_mean(expected).max()))
    assert p.worst_max_over_mean() > 1.3  # Zipf 1.4 on the trivial map is far from balanced


def test_slots_that_do_not_split_over_devices_are_refused(hits: list[list[float]]) -> None:
    with pytest.raises(PlacementError, match="do not split over 3 devices"):
        ExpertPlacement(hits, 3, REDUNDANT)


def test_a_switch_changes_the_slope_of_the_device_counters_not_their_value(hits: list[list[float]]) -> None:
    p = ExpertPlacement(hits, DEVICES, REDUNDANT)
    at_switch = p.device_tokens(1000.0).copy()
    table = improved_map(hits)
    version, checked = p.check(1, table.tolist())
    assert version == 1
    assert p.moved_slots(checked) > 0
    p.apply(version, checked, 1000.0)
    assert np.allclose(p.device_tokens(1000.0), at_switch)
    grown = p.device_tokens(1500.0) - at_switch
    assert np.allclose(grown, 500.0 * device_loads(np.asarray(hits), table, DEVICES))
    assert p.version == 1
    assert p.rebalances == 1
    assert p.balancedness() > 0.95 > sglang_balancedness(device_loads(np.asarray(hits), p.trivial_map(), DEVICES))


def test_same_version_same_map_is_idempotent_and_stale_versions_conflict(hits: list[list[float]]) -> None:
    p = ExpertPlacement(hits, DEVICES, REDUNDANT)
    table = improved_map(hits)
    p.apply(*p.check(2, table.tolist()), 10.0)
    p.apply(*p.check(2, table.tolist()), 20.0)
    assert p.rebalances == 1
    with pytest.raises(StaleVersion, match="older"):
        p.check(1, table.tolist())
    with pytest.raises(StaleVersion, match="different map"):
        p.check(2, p.trivial_map().tolist())


@pytest.mark.parametrize(
    ("version", "table", "match"),
    [
        (True, None, "version must be an integer"),
        (0, None, "version must be an integer"),
        (1, "rows", "list of lists"),
        (1, [[0] * SLOTS] * (LAYERS - 1), f"{LAYERS} MoE layers x {SLOTS} slots"),
        (1, [[0.5] * SLOTS] * LAYERS, "integers"),
        (1, [[EXPERTS, *range(SLOTS - 1)]] * LAYERS, "expert ids must be in"),
        (1, [[0] * SLOTS] * LAYERS, "has no physical slot"),
    ],
)
def test_bad_maps_are_refused_with_the_reason(
    hits: list[list[float]], version: object, table: object, match: str
) -> None:
    p = ExpertPlacement(hits, DEVICES, REDUNDANT)
    good = p.trivial_map().tolist()
    with pytest.raises(PlacementError, match=match):
        p.check(version, good if table is None else table)
    assert p.version == 0


def test_metrics_export_device_load_version_and_balancedness(hits: list[list[float]]) -> None:
    p = ExpertPlacement(hits, DEVICES, REDUNDANT)
    metrics = EngineMetrics("m", hits, p)
    assert metrics.experts is not None
    metrics.experts.routed_tokens = 300
    p.apply(*p.check(1, improved_map(hits).tolist()), 100.0)
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(metrics.registry).decode())}
    devices = {
        (s.labels["layer"], s.labels["device"]): s.value
        for s in families["semipd_sim_expert_device_tokens"].samples
        if s.name.endswith("_total")
    }
    assert len(devices) == LAYERS * DEVICES
    assert devices[("0", "1")] == pytest.approx(float(p.device_tokens(300.0)[0, 1]))
    assert sum(v for (layer, _), v in devices.items() if layer == "2") == pytest.approx(300.0 * K)
    assert families["semipd_sim_expert_placement_version"].samples[0].value == 1
    assert families["semipd_sim_expert_balance_ratio"].samples[0].value == pytest.approx(p.balancedness())
    assert families["semipd_sim_expert_max_over_mean"].samples[0].value == pytest.approx(p.worst_max_over_mean())
    assert [s.value for s in families["semipd_sim_expert_rebalances"].samples if s.name.endswith("_total")] == [1]


def test_without_a_placement_only_the_expert_counters_are_exported(hits: list[list[float]]) -> None:
    text = generate_latest(EngineMetrics("m", hits).registry).decode()
    assert "semipd_sim_expert_tokens_total" in text
    assert "semipd_sim_expert_device_tokens" not in text
    assert "semipd_sim_expert_placement_version" not in text
