"""The autoscaler's memory between evaluations, and the decisions it emits. Immutable values.

The planner returns a new state with every plan; the operator keeps it in memory per
InferencePool, the fleet simulator per run. A new operator process (a restart, a new leader)
resumes the timers from the pool's published decision log (`resumed`); fits and ITL evidence
are relearnt, which only delays moves.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from semipd.policy.estimator import Fit
from semipd.policy.evidence import ItlReading


@dataclass(frozen=True)
class Prediction:
    """What a split change predicted for its pod, kept until a settled window can check it."""

    time: float
    prefill_percent: int
    decode_percent: int
    ttft: float
    """Predicted p99 TTFT (s) at the new split."""
    itl: float
    """Predicted token-level p99 ITL (s) at the new split."""
    rate: float
    """Projected per-pod arrival rate the prediction was made for."""
    previous: tuple[int, int] | None = None
    """The split the pod left (a move that broke ITL goes back to it)."""


@dataclass(frozen=True)
class ControllerState:
    """Per pod and per node pool memory of the controller."""

    last_split_change: Mapping[str, float] = field(default_factory=dict)
    """Pod -> time of its last split change (cooldown)."""
    slack_since: Mapping[str, float] = field(default_factory=dict)
    """Node pool -> since when both SLOs had slack continuously (scale-in stabilization)."""
    breach_since: Mapping[str, float] = field(default_factory=dict)
    """Node pool -> since when capacity has been short continuously (scale-up stabilization)."""
    last_scale: Mapping[str, float] = field(default_factory=dict)
    """Node pool -> time of its last replica change."""
    full_since: Mapping[str, float] = field(default_factory=dict)
    """Node pool -> when its new pods were found unschedulable past the timeout (no room)."""
    fits: Mapping[str, Fit] = field(default_factory=dict)
    """Node pool -> fitted latency curves."""
    fix_expected: Mapping[str, float] = field(default_factory=dict)
    """Pod -> time of a split change predicted to clear its SLO miss (scale-out waits while it settles)."""
    rates: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    """Node pool -> (time, finished requests/s per Ready replica) at the last evaluation (feed-forward)."""
    restarted: Mapping[str, float] = field(default_factory=dict)
    """Node pool -> time of its last restart-mode split change (one pod at a time)."""
    first_seen: Mapping[str, float] = field(default_factory=dict)
    """Pod -> when it first showed up Ready: its first window mixes start-up (finished requests lag
    arrivals), so it neither fits nor moves before one window has passed."""
    predictions: Mapping[str, Prediction] = field(default_factory=dict)
    """Pod -> what its last split change predicted (checked against the next settled window)."""
    itl_evidence: Mapping[str, tuple[ItlReading, ...]] = field(default_factory=dict)
    """Node pool -> recent measured ITL verdicts per decode share (policy.evidence)."""
    canary: Mapping[str, float] = field(default_factory=dict)
    """Node pool -> time of its last split change below every decode share measured to meet ITL."""
    held: Mapping[str, tuple[str, float]] = field(default_factory=dict)
    """Pod -> (reason, time) of the last SplitHeld reported for it (policy.explain: reported once per
    reason, repeated only after a while)."""


@dataclass(frozen=True)
class Decision:
    """One action with a machine-readable reason and the numbers behind it."""

    time: float
    action: str
    """SplitChange | SplitHeld | SplitOutcome | ScaleOut | ScaleIn | PoolFallback | ..."""
    reason: str
    node_pool: str | None = None
    pod: str | None = None
    message: str = ""
    details: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SplitChange:
    """Move one pod's prefill/decode split."""

    pod: str
    node_pool: str
    prefill_percent: int
    decode_percent: int
    previous: tuple[int, int]


@dataclass(frozen=True)
class Plan:
    """Everything one evaluation decided."""

    replicas: Mapping[str, int]
    """Desired replicas per node pool (unchanged pools included)."""
    splits: tuple[SplitChange, ...]
    decisions: tuple[Decision, ...]
    state: ControllerState
    metrics_available: bool
    metrics_reason: str
    metrics_message: str
    slo_met: bool | None
    """None when unknown (no data)."""
    slo_message: str = ""


SCALE_ACTIONS = frozenset({"ScaleOut", "ScaleIn", "PoolFallback"})
POD_LIST = ", "
"""Separator of the pod names in a SplitHeld decision's `pods` detail (policy.explain writes it)."""


def resumed(decisions: Iterable[Decision]) -> ControllerState:
    """The timers a new operator process (a restart, a new leader) takes over from the pool's published
    decision log, so it does not repeat or undo a decision early: the last split change per pod
    (cooldown), the last restart-mode change per node pool (one at a time) and the last replica change
    per node pool, and the holds reported per pod (not reported again at once). Fits and ITL evidence
    are relearnt; every pod settles for a window (first_seen)."""
    split: dict[str, float] = {}
    restarted: dict[str, float] = {}
    scaled: dict[str, float] = {}
    held: dict[str, tuple[str, float]] = {}
    for d in decisions:
        if d.action == "SplitHeld" and d.details.get("pods"):
            held.update((pod, (d.reason, d.time)) for pod in d.details["pods"].split(POD_LIST))
        elif d.action == "SplitChange" and d.pod:
            split[d.pod] = max(split.get(d.pod, d.time), d.time)
            held.pop(d.pod, None)  # the log is oldest first: a hold after the move is reported afresh
            if d.details.get("switchMode") == "restart" and d.node_pool:
                restarted[d.node_pool] = max(restarted.get(d.node_pool, d.time), d.time)
        elif d.action in SCALE_ACTIONS and d.node_pool:
            scaled[d.node_pool] = max(scaled.get(d.node_pool, d.time), d.time)
    return ControllerState(last_split_change=split, last_scale=scaled, restarted=restarted, held=held)
