"""Engine map formats and expert-load parsing: round trips, shapes SGLang and vllm-ascend read, the
simulated engine's real exposition."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import generate_latest

from semipd.policy.experts import formats as f
from semipd.policy.experts.improved import rebalance_experts_improved
from semipd.sim.engine.metrics import EngineMetrics
from tests.policy.experts import vectors as v


def _placement() -> np.ndarray:
    return rebalance_experts_improved(v.README_WEIGHT, *v.README_GLOBAL).phy2log


def test_sglang_document_has_only_the_map_and_round_trips() -> None:
    text = f.sglang_expert_location(_placement(), 12)
    doc = json.loads(text)
    # SGLang calls init_by_mapping(**doc): any other key would be an unexpected keyword argument.
    assert list(doc) == ["physical_to_logical_map"]
    assert (f.parse_sglang_expert_location(text) == _placement()).all()


def test_sglang_rows_cover_dense_layers_with_the_trivial_map() -> None:
    # DeepSeek-V3 style: 5 transformer layers, the first 3 dense, MoE in layers 3 and 4.
    text = f.sglang_expert_location(_placement(), 12, num_layers=5, first_moe_layer=3)
    rows = json.loads(text)["physical_to_logical_map"]
    assert len(rows) == 5
    assert rows[0] == [s % 12 for s in range(16)]
    assert (f.parse_sglang_expert_location(text, first_moe_layer=3, moe_layers=2) == _placement()).all()
    with pytest.raises(f.FormatError, match="do not fit"):
        f.sglang_expert_location(_placement(), 12, num_layers=4, first_moe_layer=3)


def test_vllm_ascend_map_lists_each_device_in_slot_order_and_round_trips() -> None:
    text = f.vllm_ascend_expert_map(_placement(), 8)
    doc = json.loads(text)
    assert doc["moe_layer_count"] == 2
    layer0 = doc["layer_list"][0]
    assert layer0["layer_id"] == 0
    assert layer0["device_count"] == 8
    assert layer0["device_list"][3] == {"device_id": 3, "device_expert": _placement()[0, 6:8].tolist()}
    table, devices = f.parse_vllm_ascend_expert_map(text)
    assert devices == 8
    assert (table == _placement()).all()


def test_vllm_ascend_map_refuses_two_copies_on_one_device() -> None:
    with pytest.raises(f.FormatError, match="lists an expert twice"):
        f.vllm_ascend_expert_map(v.FLASHLB_PHY2LOG, 8)  # EPLB's map: device 7 holds expert 1 twice


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"moe_layer_count": 2, "layer_list": []}, "does not match"),
        ({"moe_layer_count": 1, "layer_list": [{"layer_id": 3, "device_list": []}]}, "layer_id"),
        (
            {
                "moe_layer_count": 1,
                "layer_list": [{"device_list": [{"device_expert": [0]}, {"device_expert": [1, 2]}]}],
            },
            "differ",
        ),
        ({"layers": []}, "not a vllm-ascend expert map"),
    ],
)
def test_vllm_ascend_parse_errors(doc: dict[str, object], message: str) -> None:
    with pytest.raises(f.FormatError, match=message):
        f.parse_vllm_ascend_expert_map(json.dumps(doc))


def test_sglang_parse_errors() -> None:
    with pytest.raises(f.FormatError, match="exactly the key"):
        f.parse_sglang_expert_location('{"logical_count": [[1, 2]]}')
    with pytest.raises(f.FormatError, match="differ in length"):
        f.parse_sglang_expert_location('{"physical_to_logical_map": [[0, 1], [0]]}')
    with pytest.raises(f.FormatError, match="integers"):
        f.parse_sglang_expert_location('{"physical_to_logical_map": [[0, 1.5]]}')


def test_envelope_round_trips_and_is_versioned() -> None:
    doc = f.ExpertPlacementDoc(
        version=7, phy2log=_placement(), num_logical=12, num_devices=8, algorithm="improved",
        pool="h200", balancedness_before=0.81, balancedness_after=0.95, extra={"policy": "global"},
    )  # fmt: skip
    back = f.ExpertPlacementDoc.from_json(doc.to_json())
    assert back.version == 7
    assert back.pool == "h200"
    assert back.algorithm == "improved"
    assert (back.phy2log == doc.phy2log).all()
    assert back.num_devices == 8
    assert back.num_logical == 12
    assert (back.balancedness_before, back.balancedness_after, dict(back.extra)) == (0.81, 0.95, {"policy": "global"})
    raw = json.loads(doc.to_json())
    assert raw["format"] == f.FORMAT
    assert raw["formatVersion"] == f.FORMAT_VERSION
    raw["formatVersion"] = 99
    with pytest.raises(f.FormatError, match="formatVersion 99"):
        f.ExpertPlacementDoc.from_json(json.dumps(raw))


def test_configmap_bundles_all_formats_and_respects_the_size_limit() -> None:
    doc = f.ExpertPlacementDoc(version=1, phy2log=_placement(), num_logical=12, num_devices=8, algorithm="eplb")
    data = f.configmap_data(doc)
    assert set(data) == {f.PLACEMENT_KEY, f.SGLANG_KEY, f.VLLM_ASCEND_KEY}
    assert all(ch.isalnum() or ch in "-._" for key in data for ch in key)  # valid ConfigMap keys
    # A real-size map (61 layers, 320 slots) fits comfortably.
    big = np.tile(np.arange(320) % 256, (61, 1))
    sized = f.configmap_data(f.ExpertPlacementDoc(1, big, 256, 64, "trivial"), num_layers=61)
    assert sum(len(x) for x in sized.values()) < f.CONFIGMAP_LIMIT / 2
    huge = np.tile(np.arange(4096) % 1024, (200, 1))
    with pytest.raises(f.FormatError, match="1 MiB"):
        f.configmap_data(f.ExpertPlacementDoc(1, huge, 1024, 64, "trivial"), vllm_ascend=False)


@given(
    st.integers(1, 4).flatmap(
        lambda devices: st.tuples(
            st.just(devices),
            st.lists(st.permutations(list(range(devices * 3))), min_size=1, max_size=3),
        )
    )
)
def test_formats_round_trip_any_anti_affine_map(case: tuple[int, list[list[int]]]) -> None:
    devices, rows = case
    table = np.array(rows)
    assert (f.parse_sglang_expert_location(f.sglang_expert_location(table, devices * 3)) == table).all()
    back, n = f.parse_vllm_ascend_expert_map(f.vllm_ascend_expert_map(table, devices))
    assert n == devices
    assert (back == table).all()


def test_the_simulated_engines_exposition_parses_into_the_weight_matrix() -> None:
    hits = [[0.5, 0.25, 0.25], [0.1, 0.6, 0.3]]
    metrics = EngineMetrics("m", hits)
    assert metrics.experts is not None
    metrics.experts.routed_tokens = 1000
    text = generate_latest(metrics.registry).decode()
    assert "semipd_sim_expert_tokens_total{" in text
    assert f.parse_expert_counters(text).tolist() == [[500.0, 250.0, 250.0], [100.0, 600.0, 300.0]]
    assert f.parse_expert_counters(text, model_name="m").shape == (2, 3)
    with pytest.raises(f.FormatError, match="no expert load samples"):
        f.parse_expert_counters(text, model_name="other")


def test_load_matrix_sums_pods_and_refuses_gaps() -> None:
    pods = [({"layer": "0", "expert": "0", "pod": p}, 2.0) for p in "ab"] + [({"layer": "0", "expert": "1"}, 1.0)]
    assert f.load_matrix(pods).tolist() == [[4.0, 1.0]]
    with pytest.raises(f.FormatError, match="missing"):
        f.load_matrix([({"layer": "0", "expert": "0"}, 1.0), ({"layer": "1", "expert": "1"}, 1.0)])
    with pytest.raises(f.FormatError, match="missing"):
        f.load_matrix([({"layer": "0", "expert": "0"}, 1.0)], experts=2)
    with pytest.raises(f.FormatError, match="not a count"):
        f.load_matrix([({"layer": "0", "expert": "0"}, -1.0)])
    with pytest.raises(f.FormatError, match="labels"):
        f.load_matrix([({"layer": "x", "expert": "0"}, 1.0)])


def test_counter_increase_handles_restarts() -> None:
    before = np.array([[10.0, 5.0]])
    after = np.array([[15.0, 2.0]])  # second cell restarted from 0 and counted 2
    assert f.counter_increase(before, after).tolist() == [[5.0, 2.0]]
