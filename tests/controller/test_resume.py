"""A new operator process (a restart, a new leader) resumes a pool's timers from its status decision log."""

from __future__ import annotations

from dataclasses import replace

from semipd.controller.autoscale import resumed_view, status_decision
from semipd.policy.planner import plan
from semipd.policy.state import Decision, resumed
from tests.policy.test_planner import CURRENT, POOLS, known, observe, pod, spec

T0 = 1_800_000_000.0


def published(*decisions: Decision) -> dict[str, object]:
    """A pool body whose status carries these decisions, as reconcile publishes them."""
    log = [status_decision(d).model_dump(by_alias=True, exclude_none=True, mode="json") for d in decisions]
    return {"metadata": {"uid": "u1"}, "status": {"decisions": log}}


def test_the_last_split_change_restart_and_scale_per_pod_and_node_pool_come_back() -> None:
    state = resumed([
        Decision(T0, "SplitChange", "TTFTOverSLO", "h200", "p0", details={"switchMode": "standby"}),
        Decision(T0 + 30, "SplitChange", "PredictedGain", "h200", "p0", details={"switchMode": "standby"}),
        Decision(T0 + 40, "SplitChange", "TTFTOverSLO", "ascend", "q0", details={"switchMode": "restart"}),
        Decision(T0 + 50, "ScaleOut", "SLOCapacityShort", "h200"),
        Decision(T0 + 60, "SplitHeld", "CanaryInProgress", "h200"),
    ])  # fmt: skip
    assert state.last_split_change == {"p0": T0 + 30, "q0": T0 + 40}
    assert state.restarted == {"ascend": T0 + 40}
    assert state.last_scale == {"h200": T0 + 50}


def test_a_resumed_view_keeps_the_log_as_it_was_and_its_timers() -> None:
    change = Decision(T0, "SplitChange", "TTFTOverSLO", "h200", "p0", "prefill 50% -> 90%", {"switchMode": "standby"})
    body = published(change)
    view = resumed_view("u1", body)
    assert view.state.last_split_change == {"p0": T0}
    (again,) = view.decisions
    assert again == status_decision(change)  # the message is not suffixed with the pod twice
    assert again.pod == "p0"


def test_a_new_leader_does_not_move_a_pod_inside_the_cooldown_its_predecessor_started() -> None:
    obs = observe([pod("p0", 13.0, (50, 100))], t=T0 + 10)  # misses TTFT: an unconstrained plan moves it
    assert plan(spec(), obs, known(), CURRENT, POOLS).splits != ()
    view = resumed_view("u1", published(Decision(T0, "SplitChange", "TTFTOverSLO", "h200", "p0")))
    watched = replace(view.state, first_seen=known().first_seen)  # the pods were watched long enough
    assert plan(spec(), obs, watched, CURRENT, POOLS).splits == ()
