"""metav1.Condition bookkeeping: set a condition without losing its lastTransitionTime.

Pure helpers over lists of `Condition`; the transition time only moves when the status flips, as
`meta.SetStatusCondition` does in Go controllers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from semipd.api.v1alpha1 import Condition, ConditionStatus

READY = "Ready"
PROGRESSING = "Progressing"
SLO_MET = "SLOMet"
METRICS_AVAILABLE = "MetricsAvailable"
DEGRADED = "Degraded"
INVALID_SPEC = "InvalidSpec"
ALL_TYPES = (READY, PROGRESSING, SLO_MET, METRICS_AVAILABLE, DEGRADED, INVALID_SPEC)


@dataclass(frozen=True)
class Transition:
    """A condition whose status changed (or appeared) in one reconcile."""

    type: str
    old: ConditionStatus | None
    new: Condition


def set_condition(
    current: Iterable[Condition],
    *,
    type: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    generation: int | None,
    now: str,
) -> list[Condition]:
    """Return `current` with `type` set; lastTransitionTime changes only when status does."""

    def build(since: str) -> Condition:
        return Condition(
            type=type,
            status=status,
            reason=reason,
            message=message,
            observed_generation=generation,
            last_transition_time=since,
        )

    out: list[Condition] = []
    replaced = False
    for cond in current:
        if cond.type != type:
            out.append(cond)
            continue
        replaced = True
        out.append(build(cond.last_transition_time if cond.status == status else now))
    if not replaced:
        out.append(build(now))
    return out


def transitions(before: Iterable[Condition], after: Iterable[Condition]) -> list[Transition]:
    """Conditions whose status or reason differs between two lists (what deserves an Event)."""
    old = {c.type: c for c in before}
    changed = []
    for cond in after:
        prev = old.get(cond.type)
        if prev is None or prev.status != cond.status or prev.reason != cond.reason:
            changed.append(Transition(cond.type, prev.status if prev else None, cond))
    return changed
