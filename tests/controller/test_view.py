"""AutoscaleView.publishes: a gate's SplitHeld, re-decided every evaluation while the gate holds, is
published once per SLO window per node pool and pod; every other decision always."""

from __future__ import annotations

from semipd.controller.view import AutoscaleView
from semipd.policy.state import Decision

WINDOW = 60.0


def test_a_gate_hold_is_published_once_per_window_per_node_pool_and_pod() -> None:
    view = AutoscaleView()
    held = [Decision(t, "SplitHeld", "RestartInProgress", "h200") for t in (0.0, 15.0, 30.0, 45.0, 60.0, 75.0)]
    assert [view.publishes(d, WINDOW) for d in held] == [True, False, False, False, True, False]
    # Another node pool, another pod or another gate is its own series.
    assert view.publishes(Decision(20.0, "SplitHeld", "RestartInProgress", "ascend"), WINDOW)
    assert view.publishes(Decision(20.0, "SplitHeld", "RestartNeedsCapacity", "h200", "p-1"), WINDOW)
    assert view.publishes(Decision(25.0, "SplitHeld", "RestartNeedsCapacity", "h200", "p-2"), WINDOW)
    assert not view.publishes(Decision(30.0, "SplitHeld", "RestartNeedsCapacity", "h200", "p-1"), WINDOW)


def test_pod_level_holds_and_actions_are_always_published() -> None:
    view = AutoscaleView()
    # Pod-level holds are thinned by the policy itself (policy.explain); split changes never repeat.
    for t in (0.0, 5.0):
        assert view.publishes(Decision(t, "SplitHeld", "BestAllowedSplit", "h200"), WINDOW)
        assert view.publishes(Decision(t, "SplitChange", "TTFTOverSLO", "h200", "p-0"), WINDOW)
        assert view.publishes(Decision(t, "ScaleOut", "SLOCapacityShort", "ascend"), WINDOW)


def test_holds_of_pods_long_gone_are_not_remembered() -> None:
    view = AutoscaleView()
    for i in range(50):
        view.publishes(Decision(i * WINDOW, "SplitHeld", "RestartNeedsCapacity", "h200", f"p-{i}"), WINDOW)
    assert list(view.gate_holds) == [("RestartNeedsCapacity", "h200", "p-49")]
