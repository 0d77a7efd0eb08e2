"""DeepSeek EPLB (deepseek-ai/EPLB `eplb.py`), re-implemented in NumPy as the baseline placement.

Same steps, tie-breaks and float32 arithmetic as the reference: greedy replication by the largest
load per replica, then cardinality-constrained greedy packing (heaviest item into the lightest
pack that still has room). Hierarchical when expert groups divide evenly over nodes, else global.
Every per-item loop runs over all layers at once, so one call costs O(P) NumPy steps.
"""

from __future__ import annotations

import numpy as np

from semipd.policy.experts.layout import AnyFloatArray, IntArray, Placement, Topology, Weight, as_weight, tables


def _descending(weight: AnyFloatArray) -> IntArray:
    """Indices sorting each row by weight, heaviest first; ties keep the lower index first."""
    return np.argsort(-weight, axis=-1, kind="stable").astype(np.int64)


def _inverse(perm: IntArray) -> IntArray:
    inv = np.empty_like(perm)
    np.put_along_axis(inv, perm, np.broadcast_to(np.arange(perm.shape[1]), perm.shape), axis=1)
    return inv


def balanced_packing(weight: AnyFloatArray, num_packs: int) -> tuple[IntArray, IntArray]:
    """Pack n items per row into `num_packs` packs of exactly n / num_packs items.

    Returns (pack index, rank within pack) of every item, both [rows, n].
    """
    rows, items = weight.shape
    if items % num_packs:
        raise ValueError(f"{items} items do not split evenly into {num_packs} packs")
    per_pack = items // num_packs
    if per_pack == 1:
        return (
            np.broadcast_to(np.arange(items, dtype=np.int64), (rows, items)).copy(),
            np.zeros((rows, items), dtype=np.int64),
        )
    order = _descending(weight)
    pack_index = np.full((rows, items), -1, dtype=np.int64)
    rank_in_pack = np.full((rows, items), -1, dtype=np.int64)
    pack_weight = np.zeros((rows, num_packs), dtype=weight.dtype)
    pack_items = np.zeros((rows, num_packs), dtype=np.int64)
    row = np.arange(rows)
    for k in range(items):
        item = order[:, k]
        # argmin returns the first minimum, as min() over pack ids does in the reference.
        pack = np.argmin(np.where(pack_items < per_pack, pack_weight, np.inf), axis=1)
        pack_index[row, item] = pack
        rank_in_pack[row, item] = pack_items[row, pack]
        pack_weight[row, pack] += weight[row, item]
        pack_items[row, pack] += 1
    return pack_index, rank_in_pack


def replicate_experts(weight: AnyFloatArray, num_phy: int) -> tuple[IntArray, IntArray, IntArray]:
    """Give each extra slot to the expert with the largest load per replica.

    Returns phy2log [rows, num_phy], the replica rank of each slot, and logcnt [rows, n].
    """
    rows, num_log = weight.shape
    if num_phy < num_log:
        raise ValueError(f"{num_phy} slots cannot hold {num_log} experts")
    row = np.arange(rows)
    phy2log = np.broadcast_to(np.arange(num_phy, dtype=np.int64), (rows, num_phy)).copy()
    rank = np.zeros((rows, num_phy), dtype=np.int64)
    logcnt = np.ones((rows, num_log), dtype=np.int64)
    for slot in range(num_log, num_phy):
        expert = np.argmax(weight / logcnt.astype(weight.dtype), axis=1)
        phy2log[:, slot] = expert
        rank[:, slot] = logcnt[row, expert]
        logcnt[row, expert] += 1
    return phy2log, rank, logcnt


def rebalance_experts_hierarchical(
    weight: AnyFloatArray, num_physical: int, num_groups: int, num_nodes: int, num_gpus: int
) -> tuple[IntArray, IntArray, IntArray]:
    """Groups onto nodes, replicas within each node, slots onto the node's GPUs.

    Returns phy2log, the replica rank of each slot, and logcnt.
    """
    layers, num_logical = weight.shape
    group_size = num_logical // num_groups
    groups_per_node = num_groups // num_nodes
    slots_per_gpu = num_physical // num_gpus
    experts_per_node = num_logical // num_nodes

    # 1. groups onto nodes; relabel experts node-major ("mlog").
    tokens_per_group = weight.reshape(layers, num_groups, group_size).sum(axis=-1, dtype=weight.dtype)
    group_pack, group_rank = balanced_packing(tokens_per_group, num_nodes)
    log2mlog = (((group_pack * groups_per_node + group_rank) * group_size)[:, :, None] + np.arange(group_size)).reshape(
        layers, num_logical
    )
    mlog2log = _inverse(log2mlog)

    # 2. replicas within each node: rows become (layer, node).
    tokens_per_mlog = np.take_along_axis(weight, mlog2log, axis=-1).reshape(-1, experts_per_node)
    phy2mlog, phyrank, mlogcnt = replicate_experts(tokens_per_mlog, num_physical // num_nodes)

    # 3. a node's slots onto its GPUs by load per replica.
    tokens_per_phy = np.take_along_axis(tokens_per_mlog / mlogcnt.astype(weight.dtype), phy2mlog, axis=-1)
    pack_index, rank_in_pack = balanced_packing(tokens_per_phy, num_gpus // num_nodes)
    pphy2phy = _inverse(pack_index * slots_per_gpu + rank_in_pack)

    # 4. back to global logical ids.
    pphy2mlog = np.take_along_axis(phy2mlog, pphy2phy, axis=-1)
    node_offset = np.arange(0, num_logical, experts_per_node).reshape(1, -1, 1)
    pphy2mlog = (pphy2mlog.reshape(layers, num_nodes, -1) + node_offset).reshape(layers, -1)
    pphy2log = np.take_along_axis(mlog2log, pphy2mlog, axis=-1)
    pphyrank = np.take_along_axis(phyrank, pphy2phy, axis=-1).reshape(layers, -1)
    logcnt = np.take_along_axis(mlogcnt.reshape(layers, -1), log2mlog, axis=-1)
    return pphy2log, pphyrank, logcnt


def rebalance_experts(weight: Weight, num_replicas: int, num_groups: int, num_nodes: int, num_gpus: int) -> Placement:
    """The reference entry point: hierarchical iff num_groups % num_nodes == 0, else global."""
    w = as_weight(weight).astype(np.float32)
    topology = Topology(num_replicas, num_groups, num_nodes, num_gpus)
    topology.check(w.shape[1])
    if not topology.hierarchical:
        num_groups = num_nodes = 1
    phy2log, phyrank, _ = rebalance_experts_hierarchical(w, num_replicas, num_groups, num_nodes, num_gpus)
    return tables(phy2log, w.shape[1], phyrank)
