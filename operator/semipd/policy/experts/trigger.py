"""When to rebalance experts (pure): imbalance above the threshold for a whole window, at most once
per rebalance interval.

Input is the pool's imbalance history -- (time in seconds, max/mean device load of the worst MoE
layer) -- the time of the last rebalance, and the thresholds from spec.placement.experts. Like a
Prometheus `for:` clause, the imbalance must stay above the threshold in every sample for the
window; samples from before the last rebalance describe the old placement and do not count, and a
gap longer than max_gap breaks the run. The decision carries a machine-readable reason and the
numbers behind it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from semipd.api.durations import format_seconds, to_seconds
from semipd.api.v1alpha1 import ExpertPlacementSpec


@dataclass(frozen=True)
class TriggerPolicy:
    threshold: float
    """Rebalance when max/mean device load exceeds this (spec rebalanceThreshold)."""
    window: float
    """Seconds the imbalance must stay above the threshold."""
    interval: float
    """Minimum seconds between two rebalances (spec rebalanceInterval)."""
    max_gap: float | None = None
    """Longest gap between samples that still counts as continuous (default: window / 2)."""

    def __post_init__(self) -> None:
        if self.threshold < 1.0 or self.window <= 0 or self.interval < 0:
            raise ValueError(f"invalid trigger policy {self}")

    @property
    def gap(self) -> float:
        return self.window / 2 if self.max_gap is None else self.max_gap

    @classmethod
    def from_spec(cls, spec: ExpertPlacementSpec) -> TriggerPolicy:
        return cls(spec.rebalance_threshold, to_seconds(spec.rebalance_window), to_seconds(spec.rebalance_interval))


@dataclass(frozen=True)
class TriggerDecision:
    rebalance: bool
    reason: str
    """CamelCase: ImbalanceSustained, Balanced, ImbalancePending, RebalanceIntervalNotElapsed,
    NoImbalanceData, ImbalanceDataStale."""
    message: str
    details: dict[str, str] = field(default_factory=dict)


def decide(
    history: Sequence[tuple[float, float]], now: float, last_rebalance: float | None, policy: TriggerPolicy
) -> TriggerDecision:
    """Rebalance now or not, and why. `history` holds (time, imbalance) samples in any order."""
    details = {
        "threshold": f"{policy.threshold:.3f}",
        "window": format_seconds(policy.window),
        "interval": format_seconds(policy.interval),
    }
    since = float("-inf") if last_rebalance is None else last_rebalance
    samples = sorted((t, v) for t, v in history if since < t <= now)
    if not samples:
        return TriggerDecision(False, "NoImbalanceData", "no imbalance samples since the last rebalance", details)
    latest_time, latest = samples[-1]
    details["imbalance"] = f"{latest:.3f}"
    if now - latest_time > policy.gap:
        details["sampleAge"] = format_seconds(now - latest_time)
        return TriggerDecision(False, "ImbalanceDataStale", "the latest imbalance sample is too old", details)
    if latest <= policy.threshold:
        return TriggerDecision(
            False, "Balanced", f"max/mean {latest:.3f} is within the threshold {policy.threshold:.3f}", details
        )
    # The run of above-threshold samples ending now, unbroken by gaps.
    start = latest_time
    for (t_prev, v_prev), (t_next, _) in zip(reversed(samples[:-1]), reversed(samples[1:]), strict=True):
        if v_prev <= policy.threshold or t_next - t_prev > policy.gap:
            break
        start = t_prev
    above_for = now - start
    details["aboveFor"] = format_seconds(above_for)
    if above_for < policy.window:
        return TriggerDecision(
            False,
            "ImbalancePending",
            f"max/mean {latest:.3f} above {policy.threshold:.3f} for {format_seconds(above_for)} "
            f"of {format_seconds(policy.window)}",
            details,
        )
    if last_rebalance is not None and now - last_rebalance < policy.interval:
        details["lastRebalanceAgo"] = format_seconds(now - last_rebalance)
        details["nextAllowedIn"] = format_seconds(last_rebalance + policy.interval - now)
        return TriggerDecision(
            False, "RebalanceIntervalNotElapsed", "imbalance sustained, but the last rebalance was too recent", details
        )
    return TriggerDecision(
        True,
        "ImbalanceSustained",
        f"max/mean {latest:.3f} above {policy.threshold:.3f} for {format_seconds(above_for)}",
        details,
    )
