"""The hand-written Prometheus exposition parses as Prometheus text and keeps histogram invariants."""

from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from semipd.agent.agentmetrics import SWITCH_DURATION_BUCKETS, AgentMetrics
from semipd.agent.promtext import Counter, Gauge, Histogram, Registry, format_value


def parsed(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_agent_metrics_render_as_valid_prometheus_text() -> None:
    m = AgentMetrics("sim", "standby_swap")
    m.prefill_share.set(0.6)
    m.decode_share.set(1.0)
    m.switches.inc()
    m.switch_duration.observe(0.3)
    m.switch_duration.observe(7.0)
    m.switch_duration.observe(1e6)
    s = parsed(m.render())
    assert s["semipd_agent_prefill_share_ratio"][()] == 0.6
    assert s["semipd_agent_switches_total"][()] == 1
    assert s["semipd_agent_failed_switches_total"][()] == 0
    assert s["semipd_agent_info"][(("engine", "sim"), ("switch_mode", "standby_swap"))] == 1
    buckets = s["semipd_agent_switch_duration_seconds_bucket"]
    assert buckets[(("le", "0.25"),)] == 0
    assert buckets[(("le", "0.5"),)] == 1
    assert buckets[(("le", "10.0"),)] == 2
    assert buckets[(("le", "+Inf"),)] == 3
    assert len(buckets) == len(SWITCH_DURATION_BUCKETS) + 1
    assert s["semipd_agent_switch_duration_seconds_count"][()] == 3
    assert s["semipd_agent_switch_duration_seconds_sum"][()] == pytest.approx(1e6 + 7.3)


def test_label_values_are_escaped() -> None:
    r = Registry()
    g = Gauge("x_gauge", "help")
    r.add(g)
    g.set(1, path='a"b\\c\nd')
    s = parsed(r.render())
    assert s["x_gauge"][(("path", 'a"b\\c\nd'),)] == 1


def test_counter_rules() -> None:
    with pytest.raises(ValueError, match="_total"):
        Counter("bad_name", "h")
    c = Counter("ok_total", "h")
    with pytest.raises(ValueError, match="only go up"):
        c.inc(-1)


def test_duplicate_and_unsorted_are_rejected() -> None:
    r = Registry()
    r.add(Gauge("g", "h"))
    with pytest.raises(ValueError, match="duplicate"):
        r.add(Gauge("g", "h"))
    with pytest.raises(ValueError, match="strictly increasing"):
        Histogram("h", "h", [1.0, 0.5])


@pytest.mark.parametrize(("v", "text"), [(1, "1.0"), (0.25, "0.25"), (math.inf, "+Inf"), (-math.inf, "-Inf")])
def test_format_value(v: float, text: str) -> None:
    assert format_value(v) == text
    assert format_value(math.nan) == "NaN"
