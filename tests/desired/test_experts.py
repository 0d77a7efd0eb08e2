"""The expert-placement ConfigMap builder and its read-back (pure)."""

from __future__ import annotations

import json

import kubernetes_validate
import numpy as np
import pytest

from semipd.desired import experts, names
from semipd.desired.owner import Owner
from semipd.policy.experts.eplb import rebalance_experts
from semipd.policy.experts.formats import (
    PLACEMENT_KEY,
    SGLANG_KEY,
    VLLM_ASCEND_KEY,
    ExpertPlacementDoc,
    FormatError,
    parse_sglang_expert_location,
    parse_vllm_ascend_expert_map,
)

OWNER = Owner("qwen", "ml", "uid-7")
FLASHLB = [[600, 560, 120, 120, 20, 10, 10, 10]]


def doc(phy2log: np.ndarray, version: int = 3) -> ExpertPlacementDoc:
    return ExpertPlacementDoc(
        version, phy2log, 8, 8, "improved", pool="ml/qwen/h200", balancedness_before=0.5, balancedness_after=0.9
    )


def anti_affine() -> np.ndarray:
    return np.array([[0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 0, 1, 0, 1, 2, 3]])


def test_name_owner_labels_and_annotations() -> None:
    cm = experts.expert_configmap(OWNER, "h200", doc(anti_affine()), written_at="2026-01-02T03:04:05Z")
    meta = cm["metadata"]
    assert meta["name"] == "qwen-h200-experts" == experts.configmap_name("qwen", "h200")
    assert meta["namespace"] == "ml"
    assert meta["ownerReferences"] == [OWNER.reference()]
    assert meta["labels"][experts.VERSION_LABEL] == "3"
    assert meta["labels"][names.POOL_LABEL] == "qwen"
    assert meta["labels"][names.NODE_POOL_LABEL] == "h200"
    assert meta["annotations"] == {
        experts.WRITTEN_ANNOTATION: "2026-01-02T03:04:05Z",
        experts.ALGORITHM_ANNOTATION: "improved",
    }
    kubernetes_validate.validate(cm, "1.35", strict=True)


def test_data_holds_every_engine_format_of_the_same_map() -> None:
    table = anti_affine()
    cm = experts.expert_configmap(OWNER, "h200", doc(table), written_at="t", num_layers=4, first_moe_layer=2)
    assert set(cm["data"]) == {PLACEMENT_KEY, SGLANG_KEY, VLLM_ASCEND_KEY}
    sglang = parse_sglang_expert_location(cm["data"][SGLANG_KEY])
    assert sglang.shape == (4, 16)
    assert sglang[2].tolist() == table[0].tolist()
    assert sglang[0].tolist() == [s % 8 for s in range(16)]  # dense layers keep the trivial map
    ascend, devices = parse_vllm_ascend_expert_map(cm["data"][VLLM_ASCEND_KEY])
    assert devices == 8
    assert ascend.tolist() == table.tolist()


def test_a_map_with_stacked_replicas_ships_without_the_vllm_ascend_file() -> None:
    # EPLB's FlashLB result puts two copies of expert 1 on the last device.
    stacked = rebalance_experts(FLASHLB, 16, 1, 1, 8).phy2log
    assert stacked[0, 14] == stacked[0, 15] == 1
    cm = experts.expert_configmap(OWNER, "h200", doc(stacked), written_at="t")
    assert set(cm["data"]) == {PLACEMENT_KEY, SGLANG_KEY}


def test_read_back_round_trips_version_map_and_time() -> None:
    cm = experts.expert_configmap(OWNER, "h200", doc(anti_affine(), version=12), written_at="2026-01-02T03:04:05Z")
    stored = experts.read_configmap(cm)
    assert stored.doc.version == 12
    assert stored.doc.phy2log.tolist() == anti_affine().tolist()
    assert stored.doc.balancedness_after == 0.9
    assert stored.written_at == "2026-01-02T03:04:05Z"


def test_read_back_refuses_foreign_or_inconsistent_configmaps() -> None:
    with pytest.raises(FormatError, match=r"no placement\.json"):
        experts.read_configmap({"metadata": {"name": "x"}, "data": {"other": "1"}})
    cm = experts.expert_configmap(OWNER, "h200", doc(anti_affine()), written_at="t")
    cm["metadata"]["labels"][experts.VERSION_LABEL] = "4"
    with pytest.raises(FormatError, match="label version 4 differs from 3"):
        experts.read_configmap(cm)
    cm["data"][PLACEMENT_KEY] = json.dumps({"format": "something-else"})
    with pytest.raises(FormatError, match=r"not a semipd\.io/expert-placement"):
        experts.read_configmap(cm)


def test_rollout_intent_touches_only_the_pod_template_annotation() -> None:
    intent = experts.rollout_intent(OWNER, "h200", 5)
    assert intent == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": names.workload_name("qwen", "h200"), "namespace": "ml"},
        "spec": {"template": {"metadata": {"annotations": {experts.VERSION_LABEL: "5"}}}},
    }


def test_pods_at_version_counts_pod_annotations() -> None:
    pods = [
        {"metadata": {"annotations": {experts.VERSION_LABEL: "2"}}},
        {"metadata": {"annotations": {experts.VERSION_LABEL: "1"}}},
        {"metadata": {}},
    ]
    assert experts.pods_at_version(pods, 2) == 1
    assert experts.pods_at_version(pods, 3) == 0
