"""v1alpha1 API: the semi-PD split bounds, the SLO and the autoscaler settings."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from semipd.api.base import ApiModel
from semipd.api.durations import Duration, to_seconds
from semipd.api.rules import Rule


def at_least(field: str, python_name: str, minimum: str) -> Rule:
    """`field` (a duration) is at least `minimum`: a zero SLO divides by zero, a 1ns window holds no sample."""
    return Rule(
        cel=f"duration(self.{field}) >= duration('{minimum}')",
        message=f"{field} must be at least {minimum}",
        holds=lambda m: to_seconds(getattr(m, python_name)) >= to_seconds(minimum),
        field_path=f".{field}",
    )


def at_most(field: str, python_name: str, maximum: str) -> Rule:
    """`field` (a duration) is at most `maximum` (a loop that never runs is as broken as one that spins)."""
    return Rule(
        cel=f"duration(self.{field}) <= duration('{maximum}')",
        message=f"{field} must be at most {maximum}",
        holds=lambda m: to_seconds(getattr(m, python_name)) <= to_seconds(maximum),
        field_path=f".{field}",
    )


# --------------------------------------------------------------------------- semi-PD, SLO, autoscaling


class SemiPDSpec(ApiModel):
    """Prefill/decode compute split of each replica (percent of SMs or AI cores per phase)."""

    __rules__ = (
        Rule(
            cel="self.minPrefillPercent <= self.maxPrefillPercent",
            message="minPrefillPercent must not exceed maxPrefillPercent",
            holds=lambda s: s.min_prefill_percent <= s.max_prefill_percent,
        ),
        Rule(
            cel="self.minPrefillPercent <= self.initialPrefillPercent && self.initialPrefillPercent <= self.maxPrefillPercent",
            message="initialPrefillPercent must lie within [minPrefillPercent, maxPrefillPercent]",
            holds=lambda s: s.min_prefill_percent <= s.initial_prefill_percent <= s.max_prefill_percent,
        ),
        Rule(
            cel="self.minDecodePercent <= self.maxDecodePercent",
            message="minDecodePercent must not exceed maxDecodePercent",
            holds=lambda s: s.min_decode_percent <= s.max_decode_percent,
        ),
        Rule(
            cel="self.minDecodePercent <= self.initialDecodePercent && self.initialDecodePercent <= self.maxDecodePercent",
            message="initialDecodePercent must lie within [minDecodePercent, maxDecodePercent]",
            holds=lambda s: s.min_decode_percent <= s.initial_decode_percent <= s.max_decode_percent,
        ),
        Rule(
            cel="self.minPrefillPercent == self.maxPrefillPercent || self.stepPercent <= self.maxPrefillPercent - self.minPrefillPercent",
            message="stepPercent must not exceed the range maxPrefillPercent - minPrefillPercent",
            holds=lambda s: (
                s.min_prefill_percent == s.max_prefill_percent
                or s.step_percent <= s.max_prefill_percent - s.min_prefill_percent
            ),
        ),
    )

    enabled: bool = True
    """Run prefill and decode as separate workers with separate compute shares and let the autoscaler move the split."""

    initial_prefill_percent: int = Field(default=100, ge=1, le=100)
    """Prefill worker's compute share at start. A burst breaks TTFT at once (the prefill queue grows)
    while decode slows gently as its share shrinks, so a pod starts with all of the device for prefill
    (Semi-PD's default is 80)."""

    initial_decode_percent: int = Field(default=50, ge=1, le=100)
    """Decode worker's compute share at start (shares may sum past 100, as MPS allows). Half the device
    still runs decode steps at about 83 % speed (share curve, k_d 0.2) and gives prefill two thirds of
    it while both run; the autoscaler raises it at once if ITL needs more (Semi-PD's default is 100)."""

    min_prefill_percent: int = Field(default=20, ge=1, le=100)
    """Lowest prefill share the autoscaler may set."""

    max_prefill_percent: int = Field(default=100, ge=1, le=100)
    """Highest prefill share the autoscaler may set."""

    min_decode_percent: int = Field(default=20, ge=1, le=100)
    """Lowest decode share the autoscaler may set. Lowering it gives prefill more of a shared device while
    inter-token latency has slack; set it to `maxDecodePercent` to move only the prefill share."""

    max_decode_percent: int = Field(default=100, ge=1, le=100)
    """Highest decode share the autoscaler may set."""

    step_percent: int = Field(default=10, ge=1, le=50)
    """Spacing of the grid of shares the autoscaler searches (both shares, from each minimum, plus each
    maximum); a split change jumps to the predicted best point of that grid in one decision."""


class SLOSpec(ApiModel):
    """Latency objectives the autoscaler keeps."""

    __rules__ = (
        at_least("ttftP99", "ttft_p99", "1ms"),
        at_least("itlP99", "itl_p99", "1ms"),
        at_least("window", "window", "1s"),
    )

    ttft_p99: Duration
    """99th-percentile time to first token, e.g. `2s`."""

    itl_p99: Duration
    """99th-percentile inter-token latency, e.g. `80ms`."""

    attainment_target: float = Field(default=0.99, ge=0.5, le=1.0)
    """Fraction of requests that must meet both objectives."""

    window: Duration = "1m"
    """Window over which percentiles are computed from Prometheus: at least 1s, and twice the operator's scrape interval."""


class AutoscalingMode(StrEnum):
    """What the autoscaler may change."""

    SEMIPD = "semipd"
    REPLICAS = "replicas"
    EXTERNAL = "external"
    OFF = "off"


class AutoscalingSpec(ApiModel):
    """How and how often the operator resizes splits and replicas."""

    __rules__ = (
        at_least("interval", "interval", "1s"),
        at_most("interval", "interval", "1h"),
        at_least("pendingTimeout", "pending_timeout", "1s"),
    )

    mode: AutoscalingMode = Field(default=AutoscalingMode.SEMIPD, strict=False)
    """`semipd` (split first, then replicas), `replicas` (replicas only), `external` (splits and placement
    only: an HPA or KEDA owns each node pool Deployment's `spec.replicas`, which the operator neither
    sets nor reverts), or `off`."""

    interval: Duration = "15s"
    """How often observations are taken and the plan is recomputed (1s to 1h)."""

    scale_up_stabilization: Duration = "0s"
    """How long a scale-out signal must persist before replicas are added."""

    scale_down_stabilization: Duration = "5m"
    """How long both SLOs must have slack before replicas are removed."""

    pending_timeout: Duration = "2m"
    """How long new pods may stay unschedulable before their demand moves to the next node pool (at least 1s)."""

    prometheus_url: str | None = Field(
        default=None, alias="prometheusURL", max_length=2048, pattern=r"^https?://[^\s/]+(/\S*)?$"
    )
    """Prometheus to query for this pool instead of the operator's default."""
