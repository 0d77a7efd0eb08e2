"""One node pool's rebalance decision (pure): its EP topology, the trigger, and the improved map if it helps."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from semipd.api.v1alpha1 import Architecture, InferencePoolSpec, NodePool
from semipd.policy.experts.improved import rebalance_experts_improved
from semipd.policy.experts.layout import FloatArray, IntArray, Topology
from semipd.policy.experts.metrics import PlacementQuality
from semipd.policy.experts.trigger import TriggerDecision, TriggerPolicy, decide

MIN_GAIN = 1e-3
"""A new map must lower the worst layer's max/mean by at least this much to be worth moving weights."""


@dataclass(frozen=True)
class ExpertTopology:
    """One replica's EP group: logical experts, physical slots and devices."""

    experts: int
    slots: int
    devices: int

    def trivial(self, layers: int) -> IntArray:
        """The map engines start with (SGLang's trivial map): slot s holds expert s % experts."""
        table: IntArray = np.tile(np.arange(self.slots, dtype=np.int64) % self.experts, (layers, 1))
        return table


def topology_of(spec: InferencePoolSpec, node_pool: NodePool) -> ExpertTopology | str:
    """The node pool's EP group, or why it has none (a clear status message)."""
    if spec.model.architecture != Architecture.MOE or spec.model.experts is None:
        return "expert placement needs an moe model with model.experts"
    experts, redundant = spec.model.experts, spec.placement.experts.redundant_experts
    devices = node_pool.accelerators_per_replica
    topology = Topology(experts + redundant, 1, 1, devices)
    try:
        topology.check(experts)
    except ValueError as err:
        return f"{experts} experts + {redundant} redundant slots on {devices} devices per replica: {err}"
    return ExpertTopology(experts, experts + redundant, devices)


@dataclass(frozen=True)
class RebalancePlan:
    """What one evaluation decided for one node pool (pure result)."""

    trigger: TriggerDecision
    before: PlacementQuality
    after: PlacementQuality | None = None
    phy2log: IntArray | None = None


def plan_rebalance(
    weight: FloatArray,
    current: IntArray,
    topology: ExpertTopology,
    history: Sequence[tuple[float, float]],
    now: float,
    last_rebalance: float | None,
    policy: TriggerPolicy,
) -> RebalancePlan:
    """Trigger, and on a rebalance the improved map, for one node pool's load (pure; CPU-bound)."""
    before = PlacementQuality.of(weight, current, topology.devices)
    samples = [*history, (now, before.worst_max_over_mean)]
    trigger = decide(samples, now, last_rebalance, policy)
    if not trigger.rebalance:
        return RebalancePlan(trigger, before)
    placement = rebalance_experts_improved(weight, topology.slots, 1, 1, topology.devices)
    after = PlacementQuality.of(weight, placement.phy2log, topology.devices)
    if after.worst_max_over_mean > before.worst_max_over_mean - MIN_GAIN:
        hold = TriggerDecision(
            False,
            "NoImprovement",
            f"the best map found reaches max/mean {after.worst_max_over_mean:.3f}, "
            f"not better than {before.worst_max_over_mean:.3f} in force",
            trigger.details,
        )
        return RebalancePlan(hold, before, after)
    return RebalancePlan(trigger, before, after, placement.phy2log)
