"""What the autoscaler knows about the fleet at one instant: typed, with unknown kept as None.

`semipd.observe` fills these from Prometheus; the fleet simulator fills them from its own state.
None means "unknown" (no data, NaN, query failed) and is never read as zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class PodObservation:
    """One engine pod over the observation window."""

    pod: str
    node_pool: str
    ready: bool = True
    ttft_p99: float | None = None
    """Seconds."""
    itl_p99: float | None = None
    """Seconds."""
    request_rate: float | None = None
    """Finished requests per second."""
    prompt_tokens_rate: float | None = None
    generation_tokens_rate: float | None = None
    running: float | None = None
    queued: float | None = None
    kv_usage: float | None = None
    prefill_percent: int | None = None
    decode_percent: int | None = None
    itl_p99_recent: float | None = None
    """Seconds, over the observation's recent window only (Observation.recent_window_s): a move that
    broke ITL shows here before a whole window has passed."""
    request_rate_recent: float | None = None
    """Finished requests per second over the recent window: a load step shows here first."""


@dataclass(frozen=True)
class NodePoolObservation:
    """One node pool's aggregates over the observation window."""

    name: str
    replicas: int = 0
    """Pods that exist (any phase)."""
    ready: int = 0
    pending_unschedulable: int = 0
    """Pods the scheduler could not place."""
    unschedulable_since: float | None = None
    """Observation time at which the oldest of those became unschedulable."""
    ttft_p99: float | None = None
    itl_p99: float | None = None
    request_rate: float | None = None
    prompt_tokens_rate: float | None = None
    generation_tokens_rate: float | None = None
    running: float | None = None
    queued: float | None = None
    kv_usage: float | None = None


RECENT_FRACTION = 0.5
"""The recent window is this fraction of the SLO window: at a 15 s scrape interval and the default
60 s window, 30 s holds the two scrapes a rate needs."""


def recent_window(window_s: float) -> float:
    """Seconds of the recent window (whole seconds: it is a PromQL range) for an SLO window of
    `window_s` whole seconds (as the operator's and the simulator's observers both round it)."""
    return max(1.0, float(round(window_s * RECENT_FRACTION)))


@dataclass(frozen=True)
class Observation:
    """The fleet of one InferencePool at `time` (seconds, any monotonic origin)."""

    time: float
    pools: Mapping[str, NodePoolObservation] = field(default_factory=dict)
    pods: tuple[PodObservation, ...] = ()
    available: bool = True
    """False when the metrics source could not be asked (down, timeout, error)."""
    age: float = 0.0
    """Seconds since the newest sample behind this observation."""
    reason: str = ""
    """Why the data is unavailable or stale, for the MetricsAvailable condition."""
    recent_window_s: float = 0.0
    """The range of PodObservation.itl_p99_recent and request_rate_recent (0: not observed)."""

    def pods_of(self, node_pool: str) -> list[PodObservation]:
        return [p for p in self.pods if p.node_pool == node_pool]
