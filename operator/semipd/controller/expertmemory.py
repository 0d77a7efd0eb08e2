"""What the expert placement step remembers of one node pool between evaluations (in operator memory)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from semipd.policy.experts.formats import ExpertPlacementDoc

HISTORY_SAMPLES = 256


@dataclass
class NodePoolMemory:
    """Operator memory of one node pool's placement (rebuilt from the ConfigMap after a restart)."""

    loaded: bool = False
    doc: ExpertPlacementDoc | None = None
    written_at: str | None = None
    last_rebalance: float | None = None
    history: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=HISTORY_SAMPLES))
    max_mean_before: float | None = None
    max_mean_after: float | None = None
    highest_seen: int = 0
    """Highest version an agent reported: the next version goes above it even if the ConfigMap was lost."""
