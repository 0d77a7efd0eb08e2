"""What the split planner tells an operator beside its moves (policy.explain): why a pod that misses an
SLO keeps its split (SplitHeld, pod-level reasons), reported once per reason and never steering a plan."""

from __future__ import annotations

from dataclasses import replace

import pytest

from semipd.api.status import DETAIL_MAX_LENGTH
from semipd.policy.explain import HOLD_REPEAT_WINDOWS, HOLD_TEXT
from semipd.policy.observation import PodObservation
from semipd.policy.planner import plan
from semipd.policy.state import Decision, Plan, resumed
from tests.policy.test_planner import CURRENT, POOLS, known, observe, pod, spec

POD_REASONS = frozenset(HOLD_TEXT)


def holds(p: Plan) -> list[Decision]:
    return [d for d in p.decisions if d.action == "SplitHeld" and d.reason in POD_REASONS]


def _canary_held() -> tuple[list[PodObservation], Plan]:
    """Two pods miss TTFT at the top prefill share: one goes below the measured decode share (the canary),
    the other may only take measured shares, and none of them serves TTFT better than its own."""
    pods = [pod("p0", 13.0, (90, 40), ttft_p99=1.5), pod("p1", 13.0, (90, 40), ttft_p99=1.3)]
    return pods, plan(spec(), observe(pods), known(), CURRENT, POOLS)


def test_a_pod_missing_ttft_that_stays_says_why_with_the_numbers() -> None:
    _, p = _canary_held()
    assert {c.pod for c in p.splits} == {"p0"}
    (held,) = holds(p)
    assert (held.reason, held.pod, held.node_pool) == ("BestAllowedSplit", "p1", "h200")
    assert held.message.startswith("p1: ")
    d = held.details
    assert (d["pods"], d["split"], d["observedTTFT"], d["lowestMeasuredDecode"]) == ("p1", "90/40", "1.3", "40")
    # Every split with more prefill share under contention lies below the measured decode share while the
    # canary is out: the refusals are counted by kind.
    assert int(d["refusedUnmeasured"]) > 0
    assert len(d) <= 16  # status.decisions' details bound
    # The gate's own, pool-level hold still explains why the canary goes alone.
    assert [x.reason for x in p.decisions if x.action == "SplitHeld" and x.reason not in POD_REASONS] == [
        "CanaryInProgress"
    ]


def test_a_hold_is_reported_once_per_reason_and_repeated_only_after_a_while() -> None:
    pods, first = _canary_held()
    window = 60.0  # spec()'s SLO window (the default)
    # The same hold an evaluation later is not news (the canary is still out, p0 in its cooldown).
    later = plan(spec(), observe(pods, t=1010.0), first.state, CURRENT, POOLS)
    assert not holds(later)
    assert later.state.held["p1"] == ("BestAllowedSplit", 1000.0)
    # Long after, it is reported again.
    state = replace(first.state, held={"p1": ("BestAllowedSplit", 1000.0 - HOLD_REPEAT_WINDOWS * window)})
    again = plan(spec(), observe(pods), state, CURRENT, POOLS)
    assert [d.pod for d in holds(again)] == ["p1"]
    # Another reason is news at once.
    other = replace(first.state, held={"p1": ("GainBelowCost", 999.0)})
    assert [d.reason for d in holds(plan(spec(), observe(pods), other, CURRENT, POOLS))] == ["BestAllowedSplit"]


def test_a_pod_that_moves_or_meets_its_slos_reports_no_hold() -> None:
    _, p = _canary_held()
    assert "p0" not in p.state.held  # it moved
    calm = plan(spec(), observe([pod("p0", 2.0, (50, 100))]), known(), CURRENT, POOLS)
    assert not holds(calm)
    assert not calm.state.held


def test_pods_held_for_one_reason_share_one_decision() -> None:
    # Saturated pods at the top prefill share whose only allowed move does not cut TTFT: the fix is replicas.
    pods = [pod(f"p{i}", 16.0, (90, 100), itl_p99=0.029) for i in range(3)]
    p = plan(spec(), observe(pods), known(), CURRENT, POOLS)
    (held,) = holds(p)
    assert (held.reason, held.pod, held.details["pods"]) == ("GainBelowCost", None, "p0, p1, p2")
    assert float(held.details["gainRequests"]) < float(held.details["costRequests"])
    assert held.details["bestSplit"] != held.details["split"]
    assert "(numbers: p0)" in held.message
    assert [c for c in p.decisions if c.action == "ScaleOut"]  # what fixes it


def test_an_itl_defence_not_worth_its_ttft_is_explained() -> None:
    s = spec(slo__itlP99="15ms")
    p = plan(s, observe([pod("p0", 9.0, (20, 60), itl_p99=0.0145)]), known(), CURRENT, POOLS)
    (held,) = holds(p)
    assert held.reason == "ITLDefenceNotWorth"
    assert int(held.details["refusedNearSLONoLessDecode"]) > 0


def test_holds_never_change_the_plan() -> None:
    pods, p = _canary_held()
    silent = plan(spec(), observe(pods), replace(known(), held={"p1": ("BestAllowedSplit", 999.0)}), CURRENT, POOLS)
    assert not holds(silent)
    assert (silent.splits, silent.replicas) == (p.splits, p.replicas)
    rest = [d for d in p.decisions if d not in holds(p)]
    assert rest == list(silent.decisions)


def test_a_new_operator_resumes_the_reported_holds_from_the_log() -> None:
    log = [
        Decision(100.0, "SplitHeld", "BestAllowedSplit", "h200", None, "", {"pods": "p0, p1"}),
        Decision(110.0, "SplitChange", "TTFTOverSLO", "h200", "p1", "", {"switchMode": "standby"}),
        Decision(120.0, "SplitHeld", "CanaryInProgress", "h200", None, "", {}),
    ]
    assert resumed(log).held == {"p0": ("BestAllowedSplit", 100.0)}


@pytest.mark.parametrize("width", [10, 60, 120])
def test_a_long_list_of_held_pods_is_split_to_fit_a_status_detail(width: int) -> None:
    names = [f"pod-{i:03d}-" + "x" * width for i in range(12)]
    pods = [pod(n, 16.0, (90, 100), itl_p99=0.029) for n in names]
    run_plan = plan(spec(), observe(pods), known(), CURRENT, POOLS)
    reported = [n for d in holds(run_plan) for n in d.details["pods"].split(", ")]
    assert sorted(reported) == sorted(names)
    assert all(len(d.details["pods"]) <= DETAIL_MAX_LENGTH for d in holds(run_plan))
