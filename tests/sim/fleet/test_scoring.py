"""Scoring by the product's SLO: TTFT plus the token-level p99 ITL of every window decoded in."""

from __future__ import annotations

import math

import pytest

from semipd.sim.fleet.requests import SimRequest
from semipd.sim.fleet.results import FINE_ITL_BOUNDS
from semipd.sim.fleet.scoring import ItlWindows, slo_score
from semipd.traces import TraceRequest


def _req(arrival: float, first: float, finish: float, output: int = 10, rejected: str = "") -> SimRequest:
    r = SimRequest(0, TraceRequest(arrival, 100, output))
    if rejected:
        r.rejected = rejected
    else:
        r.first_token, r.finish = first, finish
    return r


def test_a_request_fails_when_any_window_it_decoded_in_missed_the_itl_slo() -> None:
    p99 = [0.03, 0.2, math.nan]  # window 1 (60-120 s) misses a 50 ms ITL SLO
    reqs = [
        _req(0.0, 0.5, 50.0),  # decodes in window 0 only: attains
        _req(50.0, 50.5, 70.0),  # window 0 and 1: fails the ITL
        _req(100.0, 101.0, 101.0, output=1),  # no inter-token gaps: TTFT alone decides
        _req(130.0, 133.0, 140.0),  # TTFT over 1 s
        _req(10.0, 0, 0, rejected="no-replica"),
        _req(10.0, 0, 0, rejected="restart"),
        _req(10.0, 0, 0, rejected="kv"),
        _req(10.0, 0, 0, rejected="context"),
        _req(10.0, 0, 0, rejected="kv-wait"),
    ]
    s = slo_score(reqs, 1.0, 0.05, p99, 60.0)
    assert s.slo_attainment == pytest.approx(2 / 9)
    assert s.itl_windows_met == pytest.approx(1 / 2)
    assert s.lost == {"no ready replica": 1, "restart": 1, "rejected": 2, "KV wait": 1}
    # by arrival window: (arrivals, product-SLO attained, paper attained); the paper's mean TPOT
    # of the two long requests is seconds, so only the single-token one passes it
    assert s.windows == [(7, 1, 0), (1, 1, 1), (1, 0, 0)]


def test_window_p99_is_the_token_level_quantile_of_each_window() -> None:
    counts = [0] * (len(FINE_ITL_BOUNDS) + 1)
    w = ItlWindows(counts, 60.0)
    w.snapshot()
    fast = next(i for i, b in enumerate(FINE_ITL_BOUNDS) if b >= 0.02)
    slow = next(i for i, b in enumerate(FINE_ITL_BOUNDS) if b >= 0.13)
    counts[fast] += 980
    counts[slow] += 20  # 2 % of tokens stall: the mean is fine, the p99 is not
    w.snapshot()
    counts[fast] += 1000
    w.snapshot()
    w.snapshot()
    p = w.p99s(FINE_ITL_BOUNDS)
    assert p[0] == pytest.approx(0.13, rel=0.02)
    assert p[1] == pytest.approx(0.02, rel=0.02)
    assert math.isnan(p[2])
