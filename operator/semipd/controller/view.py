"""What the last autoscaler evaluation of one InferencePool leaves for reconcile and status."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from semipd.api.v1alpha1 import Decision, ExpertPlacementStatus, KVCachePlacementStatus, PlacementStatus
from semipd.controller.expertmemory import NodePoolMemory
from semipd.policy.split_gates import GATE_HOLDS
from semipd.policy.state import ControllerState
from semipd.policy.state import Decision as PlanDecision

MAX_DECISIONS = 20


@dataclass
class AutoscaleView:
    """Latest decisions, conditions and controller memory of one InferencePool (in operator memory)."""

    replicas: dict[str, int] | None = None
    metrics_available: bool | None = None
    metrics_reason: str = ""
    metrics_message: str = ""
    slo_met: bool | None = None
    slo_message: str = ""
    observed: dict[str, Any] | None = None
    decisions: deque[Decision] = field(default_factory=lambda: deque(maxlen=MAX_DECISIONS))
    state: ControllerState = field(default_factory=ControllerState)
    kv_cache: KVCachePlacementStatus | None = None
    """Long-context steering in force (set by the KV-cache placement step)."""
    experts: dict[str, ExpertPlacementStatus] = field(default_factory=dict)
    """Expert placement per node pool (set by the expert placement step)."""
    expert_memory: dict[str, NodePoolMemory] = field(default_factory=dict)
    """The expert placement step's memory per node pool (rebuilt from the ConfigMaps after a restart)."""
    uid: str = ""
    """The InferencePool this view belongs to: a pool deleted and re-created under its name starts afresh."""
    next_due: float = 0.0
    gate_holds: dict[tuple[str, str | None, str | None], float] = field(default_factory=dict)
    """(reason, node pool, pod) -> when a gate's SplitHeld was last published."""

    def publishes(self, d: PlanDecision, every_s: float) -> bool:
        """Whether `d` goes to the decision log and Events. A gate's SplitHeld (GATE_HOLDS) does once per
        `every_s` per node pool and pod: re-published every evaluation, a restart's minutes of holds
        pushed the split change that started it out of the MAX_DECISIONS log."""
        if d.action != "SplitHeld" or d.reason not in GATE_HOLDS:
            return True
        key = (d.reason, d.node_pool, d.pod)
        last = self.gate_holds.get(key)
        if last is not None and d.time - last < every_s:
            return False
        # Keyed by pod too: entries of pods long gone must not pile up.
        self.gate_holds = {k: t for k, t in self.gate_holds.items() if d.time - t < every_s}
        self.gate_holds[key] = d.time
        return True

    def placement(self) -> PlacementStatus | None:
        """The placement status to publish, or None when no placement step has run yet."""
        if self.kv_cache is None and not self.experts:
            return None
        return PlacementStatus(kv_cache=self.kv_cache, experts=[self.experts[k] for k in sorted(self.experts)])
