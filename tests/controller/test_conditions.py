from __future__ import annotations

from semipd.api.v1alpha1 import ConditionStatus
from semipd.controller.conditions import set_condition, transitions

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z"


def test_transition_time_moves_only_when_status_flips() -> None:
    first = set_condition([], type="Ready", status=ConditionStatus.FALSE, reason="A", message="m", generation=1, now=T0)
    same = set_condition(
        first, type="Ready", status=ConditionStatus.FALSE, reason="B", message="n", generation=2, now=T1
    )
    assert same[0].last_transition_time == T0
    assert (same[0].reason, same[0].observed_generation) == ("B", 2)
    flipped = set_condition(
        same, type="Ready", status=ConditionStatus.TRUE, reason="C", message="", generation=2, now=T1
    )
    assert flipped[0].last_transition_time == T1
    assert len(flipped) == 1


def test_other_conditions_are_kept() -> None:
    a = set_condition([], type="Ready", status=ConditionStatus.FALSE, reason="A", message="", generation=1, now=T0)
    b = set_condition(a, type="Degraded", status=ConditionStatus.FALSE, reason="A", message="", generation=1, now=T0)
    assert [c.type for c in b] == ["Ready", "Degraded"]


def test_transitions_report_status_or_reason_changes_only() -> None:
    a = set_condition([], type="Ready", status=ConditionStatus.FALSE, reason="A", message="x", generation=1, now=T0)
    b = set_condition(a, type="Ready", status=ConditionStatus.FALSE, reason="A", message="y", generation=1, now=T1)
    assert transitions(a, b) == []
    c = set_condition(b, type="Ready", status=ConditionStatus.TRUE, reason="Up", message="", generation=1, now=T1)
    (t,) = transitions(b, c)
    assert (t.type, t.old, t.new.status) == ("Ready", ConditionStatus.FALSE, ConditionStatus.TRUE)
