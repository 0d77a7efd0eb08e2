"""Semi-PD Alg. 1 with the Eq. 4 estimator (baselines.md §1)."""

from __future__ import annotations

import pytest

from semipd.sim.fleet.baselines.semipd_paper import PaperEstimator, next_split


def test_estimator_recovers_eq4_from_observations() -> None:
    est = PaperEstimator()
    a1, b1, lam, a2, b2 = 0.3, 0.05, 0.1, 0.02, 0.01
    for x in (0.3, 0.4, 0.5, 0.6, 0.7):
        est.update(x, a1 / (x - lam) + b1, 1 - x, a2 / (1 - x) + b2)
    assert est.a2 == pytest.approx(a2, rel=1e-6)
    assert est.b2 == pytest.approx(b2, rel=1e-6)
    assert est.ttft(0.45) == pytest.approx(a1 / (0.45 - lam) + b1, rel=0.05)


def test_single_observation_keeps_the_prior_shape_through_the_point() -> None:
    est = PaperEstimator()
    est.update(0.5, 1.2, 0.5, 0.04)
    assert est.ttft(0.5) == pytest.approx(1.2)
    assert est.tpot(0.5) == pytest.approx(0.04)
    assert est.ttft(0.6) < 1.2
    assert est.tpot(0.6) < 0.04


def test_one_failing_slo_moves_that_phase_up_to_max_steps() -> None:
    est = PaperEstimator()
    est.update(80 / 180, 2.0, 100 / 180, 0.02)
    # TTFT 2 s against 1 s: prefill climbs 2 points per step, three steps at most.
    assert next_split(80, 100, 2.0, 0.02, 1.0, 0.05, est, 2, 3) == (86, 100)
    # At 100 it lowers decode instead.
    assert next_split(100, 100, 2.0, 0.02, 1.0, 0.05, est, 2, 3) == (100, 94)


def test_both_pass_or_both_fail_changes_nothing() -> None:
    est = PaperEstimator()
    est.update(0.5, 0.5, 0.5, 0.02)
    assert next_split(80, 100, 0.5, 0.02, 1.0, 0.05, est, 2, 3) == (80, 100)
    assert next_split(80, 100, 2.0, 0.08, 1.0, 0.05, est, 2, 3) == (80, 100)


def test_stops_once_the_estimate_meets_the_slo() -> None:
    est = PaperEstimator()
    est.update(0.5, 0.04, 0.5, 0.06)  # TPOT 60 ms vs 50 ms
    x, y = next_split(50, 50, 0.04, 0.06, 1.0, 0.05, est, 2, 100)
    assert x == 50
    assert y > 50
    assert est.tpot(y / (x + y)) <= 0.05 < est.tpot((y - 2) / (x + y - 2))
    assert next_split(50, 50, 0.04, 0.06, 1.0, 0.05, est, 2, 3) == (50, 56)  # max_step bounds the move
