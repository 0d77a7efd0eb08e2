"""histogram_quantile as PromQL computes it, and windowed increases of scraped counters."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from semipd.sim.fleet.metrics import EngineCounters, Gauges, Histogram, ScrapeSeries, histogram_quantile, sum_counts

BOUNDS = (0.1, 0.5, 1.0)


def test_interpolates_inside_the_bucket_holding_the_rank() -> None:
    # 100 observations: 50 in (0, 0.1], 50 in (0.1, 0.5]: rank 99 is 49/50 of the way through (0.1, 0.5].
    assert histogram_quantile(0.99, BOUNDS, [50, 50, 0, 0]) == pytest.approx(0.1 + 0.4 * 49 / 50)
    # The first bucket starts at 0.
    assert histogram_quantile(0.5, BOUNDS, [10, 0, 0, 0]) == pytest.approx(0.05)


def test_rank_in_the_inf_bucket_returns_the_highest_finite_bound() -> None:
    assert histogram_quantile(0.99, BOUNDS, [1, 0, 0, 99]) == 1.0


def test_no_observations_is_nan() -> None:
    assert math.isnan(histogram_quantile(0.99, BOUNDS, [0, 0, 0, 0]))


def test_observe_uses_le_semantics() -> None:
    h = Histogram(BOUNDS)
    for v in (0.1, 0.1000001, 1.0, 7.0):
        h.observe(v)
    h.observe_many(0.3, 5)
    assert h.counts == [1, 6, 1, 1]


@given(st.lists(st.floats(0.001, 5.0), min_size=1, max_size=200), st.floats(0.01, 0.99))
def test_quantile_lies_in_the_bucket_of_the_exact_quantile(values: list[float], q: float) -> None:
    h = Histogram(BOUNDS)
    for v in values:
        h.observe(v)
    got = histogram_quantile(q, BOUNDS, h.counts)
    exact = sorted(values)[max(0, math.ceil(q * len(values)) - 1)]
    edges = (0.0, *BOUNDS, math.inf)
    k = next(i for i in range(len(BOUNDS) + 1) if exact <= edges[i + 1])
    assert edges[k] - 1e-12 <= got <= min(edges[k + 1], BOUNDS[-1]) + 1e-12


def test_window_is_the_increase_between_scrapes_inside_it() -> None:
    fine = Histogram((1.0,))
    c = EngineCounters(BOUNDS, BOUNDS, fine)
    series = ScrapeSeries(keep_s=600)
    for t in range(0, 91, 15):
        c.finished += 3
        c.ttft.observe(0.2)
        series.scrape(float(t), c.snapshot(), Gauges(1, 2, 0.5))
    d = series.window(90.0, 60.0)
    assert d is not None
    # Samples at 45, 60, 75, 90 are inside (30, 90]: three intervals of increase over 45 s.
    assert d.seconds == 45.0
    assert d.finished == 9
    assert d.rate(d.finished) == pytest.approx(0.2)
    assert d.ttft == (0, 3, 0, 0)
    assert series.window(0.0, 60.0) is None  # one sample: no rate
    assert sum_counts([d.ttft, d.ttft]) == (0, 6, 0, 0)
    assert fine.counts == [0, 0]  # TTFT does not feed the fine ITL histogram
