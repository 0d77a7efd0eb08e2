"""Improved expert placement: anti-affine, never worse than EPLB where EPLB's own map is allowed.

Same inputs, outputs and constraints as DeepSeek EPLB (equal slots per device, (E + R) % EP == 0,
each expert group on one node in the hierarchical policy), plus anti-affinity: no device holds two
replicas of one expert (a second copy only costs memory; vllm-ascend's map cannot express it).

EPLB's grouping of experts onto nodes is kept; every (layer, node) row is solved on its own:
1. replica counts by several rules -- EPLB's largest load per replica, the marginal gain
   w/c - w/(c+1), and capped rules that allow at most theta x the mean device load per piece --
   of which a cheap forecast picks the ones to search (more per row for small problems);
2. packing round by round, the heaviest remaining replicas onto the lightest devices;
3. local search on the busiest devices: swaps with slightly lighter replicas, and count moves
   (a slot changes expert). A move is made only if every device it touches ends below the old
   peak, so the sorted load vector falls strictly and the search terminates;
4. per row, EPLB's own slots where they are lighter and anti-affine; rows that lose to an EPLB
   map with stacked copies get a second, wider search.
Everything is vectorised over rows (and over candidates).
"""

from __future__ import annotations

import numpy as np

from semipd.policy.experts.eplb import rebalance_experts
from semipd.policy.experts.improved_counts import CANDIDATE_BUDGET, _count_candidates
from semipd.policy.experts.improved_search import _REL_TOL, MAX_STEPS, BoolArray, _pack_rounds, _search, _slot_kinds
from semipd.policy.experts.layout import FloatArray, IntArray, Placement, Topology, Weight, as_weight, tables
from semipd.policy.experts.metrics import device_loads

RETRY_BUDGET = 8_192
RETRY_STEPS = 150
"""Slot-rows and steps for the second search of rows that lose to an EPLB map with stacked copies."""


def place_flat(
    w: FloatArray,
    num_devices: int,
    per_device: int,
    budget: int = CANDIDATE_BUDGET,
    max_steps: int = MAX_STEPS,
    target: FloatArray | None = None,
) -> IntArray:
    """Best anti-affine placement for each row of w [rows, experts] -> expert per slot [rows, slots].

    A row's search may stop once some candidate's busiest device is at or below `target` (per row).
    """
    counts, owner = _count_candidates(w, num_devices, per_device, budget)
    st = _pack_rounds(w[owner], counts, num_devices, per_device, num_devices)
    _search(st, max_steps, None if target is None else target[owner], owner)
    kinds = _slot_kinds(st)
    peak = (st.w / st.counts)[np.arange(owner.size)[:, None], kinds].reshape(owner.size, num_devices, -1)
    peak = peak.sum(axis=2).max(axis=1)
    # Per row the lightest candidate; the earliest candidate wins ties, so the choice is deterministic.
    order = np.lexsort((np.arange(owner.size), peak, owner))
    first = np.ones(order.size, dtype=bool)
    first[1:] = owner[order][1:] != owner[order][:-1]
    best: IntArray = kinds[order[first]]
    return best


def has_duplicates(phy2log: IntArray, num_devices: int) -> BoolArray:
    """Per row: some device holds two replicas of one expert (slots device-major, equal per device)."""
    per_device = np.sort(phy2log.reshape(phy2log.shape[0], num_devices, -1), axis=2)
    dup: BoolArray = (per_device[:, :, 1:] == per_device[:, :, :-1]).any(axis=(1, 2))
    return dup


def rebalance_experts_improved(
    weight: Weight, num_replicas: int, num_groups: int, num_nodes: int, num_gpus: int, *, anti_affinity: bool = True
) -> Placement:
    """Drop-in for eplb.rebalance_experts (same policy switch and layout), never worse than it.

    It keeps EPLB's grouping of experts onto nodes (hierarchical policy) and re-places each node of
    each layer. A node keeps EPLB's own slots where those are lighter on its busiest device and
    allowed: always without anti_affinity; with it, only where EPLB's slots there happen to be
    anti-affine. (EPLB sometimes gains by stacking two copies on one device, which anti-affinity
    forbids; see docs/placement.md.) Raises ValueError when anti-affinity cannot be met: more slots
    per node than its experts times its devices.
    """
    w = as_weight(weight)
    layers, experts = w.shape
    topology = Topology(num_replicas, num_groups, num_nodes, num_gpus)
    topology.check(experts)
    baseline = rebalance_experts(w, num_replicas, num_groups, num_nodes, num_gpus)
    if not topology.hierarchical:
        num_nodes = 1
    devices_per_node = num_gpus // num_nodes
    experts_per_node = experts // num_nodes
    slots_per_node = num_replicas // num_nodes
    if slots_per_node > experts_per_node * devices_per_node:
        if not anti_affinity:
            return baseline
        raise ValueError(
            f"anti-affinity allows at most {experts_per_node * devices_per_node} slots per node "
            f"({experts_per_node} experts x {devices_per_node} devices), got {slots_per_node}"
        )
    # Rows are (layer, node); EPLB's node of each logical expert is read off its own map.
    theirs = baseline.phy2log.reshape(layers * num_nodes, slots_per_node)
    node_experts = np.sort(theirs, axis=1)
    keep = np.ones_like(node_experts, dtype=bool)
    keep[:, 1:] = node_experts[:, 1:] != node_experts[:, :-1]
    node_experts = node_experts[keep].reshape(layers * num_nodes, experts_per_node)
    node_w = np.take_along_axis(np.repeat(w, num_nodes, axis=0), node_experts, axis=1)
    # EPLB's slots in the same node-local ids (node_experts rows are sorted; offset rows apart).
    offset = (np.arange(theirs.shape[0]) * experts)[:, None]
    found = np.searchsorted((node_experts + offset).ravel(), (theirs + offset).ravel())
    theirs_local = found.reshape(theirs.shape) - offset // experts * experts_per_node
    theirs_peak = device_loads(node_w, theirs_local, devices_per_node).max(axis=1)
    allowed = ~has_duplicates(theirs, devices_per_node) if anti_affinity else np.ones(theirs.shape[0], dtype=bool)
    local = place_flat(node_w, devices_per_node, num_replicas // num_gpus)
    ours = np.take_along_axis(node_experts, local, axis=1)
    ours_peak = device_loads(node_w, local, devices_per_node).max(axis=1)
    # Rows that lose to a map we may not take get a second, wider search (few rows: many candidates each).
    losing = np.flatnonzero(~allowed & (theirs_peak < ours_peak * (1.0 - _REL_TOL)))
    if losing.size:
        retry = place_flat(
            node_w[losing],
            devices_per_node,
            num_replicas // num_gpus,
            RETRY_BUDGET,
            RETRY_STEPS,
            target=theirs_peak[losing] * (1.0 - 2 * _REL_TOL),
        )
        retry_peak = device_loads(node_w[losing], retry, devices_per_node).max(axis=1)
        better = retry_peak < ours_peak[losing] * (1.0 - _REL_TOL)
        local[losing[better]] = retry[better]
        ours[losing[better]] = np.take_along_axis(node_experts[losing[better]], retry[better], axis=1)
        ours_peak[losing[better]] = retry_peak[better]
    use_theirs = allowed & (theirs_peak < ours_peak * (1.0 - _REL_TOL))
    phy2log = np.where(use_theirs[:, None], theirs, ours).reshape(layers, num_replicas)
    return tables(phy2log, experts)
