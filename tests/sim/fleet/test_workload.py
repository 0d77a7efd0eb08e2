"""Trace preparation: context fitting, rate scaling, and the time-compressed day shape."""

from __future__ import annotations

import pytest

from semipd.traces import day_shape, diurnal, load_trace, mean_rate, prepare


def test_prepare_fits_the_context_and_sets_the_rate() -> None:
    reqs = prepare("mooncake", context_length=32768, rate=4.0)
    assert all(r.input_tokens + r.output_tokens <= 32768 for r in reqs)
    assert len(reqs) == len(load_trace("mooncake"))
    assert mean_rate(reqs) == pytest.approx(4.0)
    assert all(len(r.hash_ids) * 512 < r.input_tokens + 512 for r in reqs)


def test_day_shape_follows_the_diurnal_curve() -> None:
    base = load_trace("azure-code")
    day = day_shape(base, 3600.0, peak_rate=10.0, trough=0.2)
    # Mean of the curve x day; the trace rides its own bursts on it (a partial loop adds a few %).
    assert len(day) == pytest.approx(10.0 * 3600.0 * (0.2 + 0.8 * 0.5), rel=0.06)
    assert day[-1].arrival_s < 3600.0
    quarter = [sum(1 for r in day if k * 900 <= r.arrival_s < (k + 1) * 900) for k in range(4)]
    assert quarter[1] > 1.5 * quarter[0]  # the curve alone gives 2.5x; the trace adds its own swings
    assert quarter[2] > 1.5 * quarter[3]
    assert diurnal(0.0, 10.0, 0.3) == pytest.approx(0.3)
    assert diurnal(5.0, 10.0, 0.3) == pytest.approx(1.0)
