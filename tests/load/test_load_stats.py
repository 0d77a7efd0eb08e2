"""Pure summary statistics of load results."""

from __future__ import annotations

import pytest

from semipd.load.stats import SLO, Distribution, RequestResult, format_summary, quantile, summarize


def ok(i: int, ttft: float, e2e: float, tokens: int, gaps: tuple[float, ...] = ()) -> RequestResult:
    return RequestResult(i, "http://127.0.0.1:1", float(i), float(i) + 0.5, 100, tokens, "ok", tokens, ttft, e2e, gaps)


def test_quantile_interpolates_like_numpy() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert quantile(values, 0.0) == 1.0
    assert quantile(values, 1.0) == 4.0
    assert quantile(values, 0.5) == 2.5
    assert quantile(values, 0.9) == pytest.approx(3.7)
    assert quantile([5.0], 0.99) == 5.0
    with pytest.raises(ValueError, match="no values"):
        quantile([], 0.5)
    with pytest.raises(ValueError, match="q must"):
        quantile(values, 1.5)


def test_distribution_of_values() -> None:
    d = Distribution.of(float(v) for v in range(1, 101))
    assert d.count == 100
    assert d.mean == pytest.approx(50.5)
    assert d.p50 == pytest.approx(50.5)
    assert d.p99 == pytest.approx(99.01)
    assert d.max == 100.0
    assert Distribution.of([]) == Distribution(0)


def test_tpot_excludes_the_first_token() -> None:
    r = ok(0, ttft=0.2, e2e=1.2, tokens=11)
    assert r.tpot_s == pytest.approx(0.1)
    assert ok(1, 0.2, 0.2, 1).tpot_s is None
    assert r.client_queue_s == pytest.approx(0.5)


def test_summary_counts_slo_attainment_over_all_requests_and_goodput() -> None:
    results = [
        ok(0, ttft=0.1, e2e=1.1, tokens=11),  # tpot 0.1: meets both
        ok(1, ttft=0.9, e2e=1.9, tokens=11),  # ttft miss
        ok(2, ttft=0.1, e2e=3.1, tokens=11),  # tpot 0.3: itl miss
        ok(3, ttft=0.2, e2e=0.2, tokens=1),  # one token: itl vacuously met
        RequestResult(4, "http://127.0.0.1:1", 4.0, 4.0, 100, 10, "http_error", http_status=500, error="x"),
    ]
    s = summarize(results, duration_s=10.0, slo=SLO(ttft_s=0.5, itl_s=0.15))
    assert s.requests == 5
    assert s.ok == 4
    assert s.errors == {"http_error": 1}
    assert s.ttft_attainment == pytest.approx(3 / 5)
    assert s.itl_attainment == pytest.approx(3 / 5)
    assert s.slo_attainment == pytest.approx(2 / 5)
    assert s.goodput_rps == pytest.approx(0.2)
    assert s.throughput_rps == pytest.approx(0.4)
    assert s.output_tokens_per_s == pytest.approx(3.4)
    assert s.ttft.count == 4
    assert s.tpot.count == 3
    text = format_summary(s)
    assert "goodput 0.20 req/s" in text
    assert "both: 40.0 %" in text


def test_summary_without_slo_reports_no_attainment() -> None:
    s = summarize([ok(0, 0.1, 0.5, 5, (0.1, 0.1, 0.1, 0.1))], duration_s=1.0)
    assert s.slo_attainment is None
    assert s.goodput_rps is None
    assert s.itl.count == 4
    assert s.itl.p50 == pytest.approx(0.1)
    assert "SLO" not in format_summary(s)


def test_result_json_is_plain() -> None:
    d = ok(0, 0.1, 0.5, 3, (0.2, 0.2)).to_json()
    assert d["itl_s"] == [0.2, 0.2]
    assert d["tpot_s"] == pytest.approx(0.2)
    assert d["status"] == "ok"
