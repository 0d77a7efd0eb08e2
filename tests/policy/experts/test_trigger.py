"""Rebalance trigger: sustained imbalance, rate limit, and the reasons for not acting."""

from __future__ import annotations

import pytest

from semipd.api.v1alpha1 import ExpertPlacementSpec
from semipd.policy.experts.trigger import TriggerPolicy, decide

POLICY = TriggerPolicy(threshold=1.3, window=300.0, interval=600.0)


def every(start: float, end: float, step: float, value: float) -> list[tuple[float, float]]:
    n = int((end - start) / step)
    return [(start + i * step, value) for i in range(n + 1)]


def test_sustained_imbalance_triggers_with_numbers() -> None:
    d = decide(every(0, 300, 30, 1.5), now=300, last_rebalance=None, policy=POLICY)
    assert d.rebalance
    assert d.reason == "ImbalanceSustained"
    assert d.details["imbalance"] == "1.500"
    assert d.details["aboveFor"] == "5m"
    assert d.details["threshold"] == "1.300"


def test_imbalance_not_yet_long_enough_is_pending() -> None:
    history = every(0, 120, 30, 1.1) + every(150, 300, 30, 1.5)
    d = decide(history, now=300, last_rebalance=None, policy=POLICY)
    assert not d.rebalance
    assert d.reason == "ImbalancePending"
    assert d.details["aboveFor"] == "2m30s"


def test_balanced_pool_does_nothing() -> None:
    d = decide(every(0, 600, 30, 1.3), now=600, last_rebalance=None, policy=POLICY)
    assert not d.rebalance
    assert d.reason == "Balanced"


def test_at_most_once_per_interval() -> None:
    history = every(0, 1000, 30, 2.0)
    recent = decide(history, now=1000, last_rebalance=500, policy=POLICY)
    assert not recent.rebalance
    assert recent.reason == "RebalanceIntervalNotElapsed"
    assert recent.details["nextAllowedIn"] == "1m40s"
    later = decide(history, now=1100, last_rebalance=500, policy=POLICY)
    assert later.rebalance


def test_samples_from_before_the_last_rebalance_do_not_count() -> None:
    history = every(0, 1000, 30, 2.0)
    # The run restarts after the rebalance at 800: only 200 s above the threshold since then.
    d = decide(history, now=1000, last_rebalance=800, policy=TriggerPolicy(1.3, 300.0, 0.0))
    assert not d.rebalance
    assert d.reason == "ImbalancePending"
    none = decide(every(0, 100, 30, 2.0), now=1000, last_rebalance=900, policy=POLICY)
    assert none.reason == "NoImbalanceData"


def test_a_gap_breaks_the_run_and_stale_data_is_not_trusted() -> None:
    gappy = every(0, 100, 30, 2.0) + every(300, 400, 30, 2.0)  # 210 s without samples > window / 2
    assert decide(gappy, now=400, last_rebalance=None, policy=POLICY).reason == "ImbalancePending"
    stale = decide(every(0, 300, 30, 2.0), now=800, last_rebalance=None, policy=POLICY)
    assert not stale.rebalance
    assert stale.reason == "ImbalanceDataStale"


def test_unsorted_history_and_future_samples() -> None:
    history = [*list(reversed(every(0, 300, 30, 1.5))), (900.0, 1.0)]
    assert decide(history, now=300, last_rebalance=None, policy=POLICY).rebalance


def test_policy_from_spec_and_validation() -> None:
    spec = ExpertPlacementSpec(enabled=True, rebalance_threshold=1.2, rebalance_interval="15m", rebalance_window="2m")
    p = TriggerPolicy.from_spec(spec)
    assert (p.threshold, p.window, p.interval, p.gap) == (1.2, 120.0, 900.0, 60.0)
    with pytest.raises(ValueError, match="invalid trigger policy"):
        TriggerPolicy(0.5, 60.0, 60.0)
