"""DeepSeek EPLB port: the reference's published vectors, exactly, and the table invariants."""

from __future__ import annotations

import numpy as np
import pytest

from semipd.policy.experts.eplb import balanced_packing, rebalance_experts, replicate_experts
from semipd.policy.experts.layout import Topology
from semipd.policy.experts.metrics import device_loads, max_over_mean
from tests.policy.experts import vectors as v


def test_readme_example_hierarchical_is_reproduced_exactly() -> None:
    placement = rebalance_experts(v.README_WEIGHT, *v.README_HIERARCHICAL)
    assert placement.phy2log.tolist() == v.README_PHY2LOG
    loads = device_loads(v.README_WEIGHT, placement.phy2log, 8)
    assert loads[0].tolist() == v.README_LAYER0_LOADS
    assert max_over_mean(loads).round(3).tolist() == list(v.README_MAX_OVER_MEAN)


def test_readme_example_global_policy_and_trivial_map() -> None:
    placement = rebalance_experts(v.README_WEIGHT, *v.README_GLOBAL)
    loads = device_loads(v.README_WEIGHT, placement.phy2log, 8)
    assert max_over_mean(loads).round(3).tolist() == list(v.README_GLOBAL_MAX_OVER_MEAN)
    trivial = device_loads(v.README_WEIGHT, np.array(v.README_TRIVIAL_MAP), 8)
    assert max_over_mean(trivial).round(3).tolist() == list(v.README_TRIVIAL_MAX_OVER_MEAN)


def test_flashlb_counter_example_is_reproduced_exactly() -> None:
    placement = rebalance_experts(v.FLASHLB_WEIGHT, *v.FLASHLB_TOPOLOGY)
    assert placement.logcnt.tolist() == v.FLASHLB_LOGCNT
    assert placement.phy2log.tolist() == v.FLASHLB_PHY2LOG
    loads = device_loads(v.FLASHLB_WEIGHT, placement.phy2log, 8)
    assert loads[0].tolist() == v.FLASHLB_LOADS
    assert round(float(max_over_mean(loads)[0]), 2) == v.FLASHLB_MAX_OVER_MEAN
    # The last device holds two copies of expert 1: EPLB has no anti-affinity.
    assert placement.phy2log[0, 14:].tolist() == [1, 1]


def test_flashlb_without_redundancy() -> None:
    placement = rebalance_experts(v.FLASHLB_WEIGHT, 8, 1, 1, 8)
    loads = device_loads(v.FLASHLB_WEIGHT, placement.phy2log, 8)
    assert round(float(max_over_mean(loads)[0]), 2) == v.FLASHLB_NO_REDUNDANCY_MAX_OVER_MEAN


@pytest.mark.parametrize("name", sorted(v.ALL))
def test_tables_agree_with_phy2log(name: str) -> None:
    weight, topology = v.ALL[name]
    placement = rebalance_experts(weight, *topology)
    layers, experts = np.array(weight).shape
    for layer in range(layers):
        for e in range(experts):
            slots = [s for s in placement.log2phy[layer, e].tolist() if s >= 0]
            assert len(slots) == placement.logcnt[layer, e] >= 1
            assert all(placement.phy2log[layer, s] == e for s in slots)
    assert placement.logcnt.sum(axis=1).tolist() == [topology[0]] * layers


def test_log2phy_ranks_follow_replication_order() -> None:
    # Replica 0 of every expert is its original slot in the node-major relabelling; extra replicas
    # come after it, in the order replicate_experts made them (the reference's phyrank).
    placement = rebalance_experts(v.README_WEIGHT, *v.README_HIERARCHICAL)
    assert placement.log2phy[0, 1].tolist() == [15, 13]
    assert placement.log2phy[0, 5].tolist() == [0, 2]


def test_balanced_packing_takes_lightest_open_pack_and_keeps_sizes() -> None:
    w = np.array([[5.0, 4.0, 3.0, 3.0, 2.0, 1.0]], dtype=np.float32)
    pack, rank = balanced_packing(w, 2)
    # 5 -> p0; 4 -> p1; 3 -> p1 (4 < 5); 3 -> p0 (5 < 7); 2 -> p1 (7 < 8), now full; 1 -> p0.
    assert pack.tolist() == [[0, 1, 1, 0, 1, 0]]
    assert rank.tolist() == [[0, 0, 1, 1, 2, 2]]
    assert [float(w[0, pack[0] == p].sum()) for p in range(2)] == [9.0, 9.0]


def test_balanced_packing_one_item_per_pack_is_identity() -> None:
    pack, rank = balanced_packing(np.array([[1.0, 9.0, 5.0]], dtype=np.float32), 3)
    assert pack.tolist() == [[0, 1, 2]]
    assert rank.tolist() == [[0, 0, 0]]


def test_replicate_experts_gives_extra_slots_to_the_largest_load_per_replica() -> None:
    phy2log, rank, logcnt = replicate_experts(np.array([[10.0, 4.0, 6.0]], dtype=np.float32), 6)
    # 10 -> 5 (2 copies), then 6 > 5 -> 3, then 5 > 4 -> 10/3
    assert phy2log.tolist() == [[0, 1, 2, 0, 2, 0]]
    assert rank.tolist() == [[0, 0, 0, 1, 1, 2]]
    assert logcnt.tolist() == [[3, 1, 2]]


@pytest.mark.parametrize(
    ("topology", "experts", "message"),
    [
        ((10, 1, 1, 4), 8, "multiple of EP"),
        ((6, 1, 1, 2), 8, "cannot hold"),
        ((16, 3, 3, 8), 12, "split evenly over 3 nodes"),
        ((16, 5, 1, 8), 12, "do not split into 5 groups"),
    ],
)
def test_invalid_topologies_are_rejected(topology: tuple[int, int, int, int], experts: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        rebalance_experts(np.ones((1, experts)), *topology)
    with pytest.raises(ValueError, match=message):
        Topology(*topology).check(experts)


def test_bad_weights_are_rejected() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        rebalance_experts([[1.0, -1.0]], 2, 1, 1, 2)
    with pytest.raises(ValueError, match="shape"):
        rebalance_experts([1.0, 2.0], 2, 1, 1, 2)
