"""Shapes shared by every expert-placement policy: validated inputs and the three output tables.

A placement is `phy2log[L, P]` (logical expert in each physical slot; slot s lives on device
s // (P / D)); `log2phy[L, E, X]` (slots of each logical expert, -1 padded) and `logcnt[L, E]`
(replicas per logical expert) are derived from it and from the order in which replicas were made.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
AnyFloatArray = npt.NDArray[np.floating[Any]]
Weight = Sequence[Sequence[float]] | npt.NDArray[np.floating] | npt.NDArray[np.integer]
"""Estimated load [layers, logical experts]: token counts over a recent window."""


class Placement(NamedTuple):
    """What `rebalance_experts` returns, in the reference's order."""

    phy2log: IntArray
    log2phy: IntArray
    logcnt: IntArray


@dataclass(frozen=True)
class Topology:
    """One EP group: physical slots, expert groups, nodes and devices (GPUs or NPU dies)."""

    num_replicas: int
    """Physical expert slots (logical + redundant), a multiple of num_gpus."""
    num_groups: int
    """Expert groups of group-limited routing (DeepSeek-V3: 8); 1 when the model has none."""
    num_nodes: int
    num_gpus: int

    @property
    def hierarchical(self) -> bool:
        """The reference's policy switch: pack groups onto nodes first iff they divide evenly."""
        return self.num_groups % self.num_nodes == 0

    @property
    def slots_per_gpu(self) -> int:
        return self.num_replicas // self.num_gpus

    def check(self, num_logical: int) -> None:
        """Raise ValueError unless the reference's divisibility rules hold for `num_logical` experts."""
        if min(self.num_replicas, self.num_groups, self.num_nodes, self.num_gpus, num_logical) < 1:
            raise ValueError(f"all sizes must be positive: {self} with {num_logical} experts")
        if self.num_replicas < num_logical:
            raise ValueError(f"{self.num_replicas} slots cannot hold {num_logical} logical experts")
        if self.num_replicas % self.num_gpus:
            raise ValueError(f"(E + R) = {self.num_replicas} must be a multiple of EP = {self.num_gpus}")
        if self.hierarchical:
            # The global policy treats the EP group as one node, so only the hierarchical one needs these.
            if self.num_gpus % self.num_nodes:
                raise ValueError(f"{self.num_gpus} devices do not split evenly over {self.num_nodes} nodes")
            if num_logical % self.num_groups:
                raise ValueError(f"{num_logical} experts do not split into {self.num_groups} groups")
            if self.num_replicas % self.num_nodes:
                raise ValueError(f"{self.num_replicas} slots do not split evenly over {self.num_nodes} nodes")


def as_weight(weight: Weight) -> FloatArray:
    """A float64 [L, E] copy of `weight`; rejects ragged, negative or non-finite loads."""
    w = np.array(weight, dtype=np.float64)
    if w.ndim != 2 or w.shape[0] < 1 or w.shape[1] < 1:
        raise ValueError(f"weight must be [layers, experts], got shape {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("weight must be finite and non-negative")
    return w


def ranks_in_slot_order(phy2log: IntArray) -> IntArray:
    """Replica rank of each slot when replicas of an expert are numbered in slot order."""
    layers, slots = phy2log.shape
    order = np.argsort(phy2log, axis=1, kind="stable")
    sorted_ids = np.take_along_axis(phy2log, order, axis=1)
    position = np.broadcast_to(np.arange(slots), (layers, slots))
    is_first = np.ones_like(sorted_ids, dtype=bool)
    is_first[:, 1:] = sorted_ids[:, 1:] != sorted_ids[:, :-1]
    run_start = np.maximum.accumulate(np.where(is_first, position, 0), axis=1)
    ranks = np.empty_like(phy2log)
    np.put_along_axis(ranks, order, position - run_start, axis=1)
    return ranks


def tables(phy2log: IntArray, num_logical: int, phyrank: IntArray | None = None) -> Placement:
    """log2phy and logcnt of `phy2log`; `phyrank` orders each expert's replicas (slot order if None)."""
    layers, slots = phy2log.shape
    if phy2log.min() < 0 or phy2log.max() >= num_logical:
        raise ValueError(f"phy2log holds ids outside 0..{num_logical - 1}")
    logcnt = np.zeros((layers, num_logical), dtype=np.int64)
    np.add.at(logcnt, (np.arange(layers)[:, None], phy2log), 1)
    if np.any(logcnt == 0):
        raise ValueError("every logical expert needs at least one physical slot")
    ranks = ranks_in_slot_order(phy2log) if phyrank is None else phyrank
    width = int(logcnt.max())
    log2phy = np.full((layers, num_logical * width), -1, dtype=np.int64)
    np.put_along_axis(log2phy, phy2log * width + ranks, np.broadcast_to(np.arange(slots), (layers, slots)), axis=1)
    return Placement(phy2log.astype(np.int64), log2phy.reshape(layers, num_logical, width), logcnt)
