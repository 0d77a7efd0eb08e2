"""Semi-PD's coded DynamicPartitioner.replan (baselines.md §2)."""

from __future__ import annotations

import math

import pytest

from semipd.sim.fleet.baselines.semipd_code import (
    future_tpot,
    future_ttft,
    replan,
    scale_latency,
    scale_tpot,
    scale_waiting,
)
from semipd.sim.fleet.requests import SimRequest
from semipd.traces import TraceRequest


def window(ttft: float, tpot: float, exec_s: float, n: int = 400) -> list[SimRequest]:
    out = []
    for k in range(n):
        r = SimRequest(k, TraceRequest(0.0, 100, 11))
        r.first_token = ttft
        r.prefill_exec = exec_s
        r.finish = ttft + 10 * tpot
        out.append(r)
    return out


def test_scale_curves_match_the_reference_table() -> None:
    assert scale_latency(100) == pytest.approx(1.051, abs=1e-3)
    assert scale_tpot(80) == pytest.approx(1.178, abs=1e-3)
    assert scale_waiting(50) == pytest.approx(2.173, abs=1e-3)


def test_both_fail_resets_to_full_shares() -> None:
    assert replan(80, 90, window(2.0, 0.2, 0.5), 1.0, 0.1) == (100, 100)


def test_both_pass_keeps_the_split() -> None:
    assert replan(84, 100, window(0.5, 0.05, 0.2), 1.0, 0.1) == (84, 100)


def test_tpot_margin_counts() -> None:
    # 1.1 x 0.095 > 0.1: TPOT fails although p90 is under the SLO; decode is raised.
    x, y = replan(80, 90, window(0.5, 0.095, 0.2), 1.0, 0.1)
    assert x == 80
    assert 90 < y <= 96


def test_tpot_fail_at_full_decode_lowers_prefill_within_the_ttft_slo() -> None:
    x, y = replan(100, 100, window(0.5, 0.2, 0.3), 1.0, 0.1)
    assert y == 100
    assert 94 <= x < 100
    assert future_ttft(x, 100, 0.2, 0.3) <= 1.0


def test_ttft_fail_raises_prefill_until_predicted_ok() -> None:
    x, y = replan(80, 100, window(1.05, 0.05, 0.6), 1.0, 0.1)
    assert y == 100
    assert x > 80
    assert x == 82 or future_ttft(x - 2, 80, 0.45, 0.6) > 1.0


def test_ttft_fail_at_full_prefill_lowers_decode_no_lower_than_80() -> None:
    x, y = replan(100, 82, window(1.5, 0.01, 0.6), 1.0, 0.1)
    assert x == 100
    assert y == 80
    assert future_tpot(80, 82, 0.01) <= 0.1
    assert math.isfinite(future_tpot(80, 100, 0.05))
