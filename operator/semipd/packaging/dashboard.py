"""The chart's Grafana dashboard, built from the same PromQL as the rules, and the helpers that
turn its queries into what Prometheus receives (for the tests that evaluate every panel).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from semipd.engines import DRIVERS
from semipd.packaging.families import (
    AGENT_DECODE,
    AGENT_SPLIT,
    AGENT_SWITCH_SECONDS,
    ANY_POOL,
    BY_NODE_POOL,
    NODE_POOL,
    POOL,
    SIM_DECODE,
    SIM_SPLIT,
    any_family,
    latency_p99,
)

_SEL = 'namespace=~"$namespace", pool=~"$pool"'
_ENGINE_SEL = f'namespace=~"$namespace", {POOL}=~"$pool"'


def _target(expr: str, legend: str, ref: str) -> dict[str, Any]:
    return {"datasource": {"type": "prometheus", "uid": "${datasource}"}, "expr": expr, "legendFormat": legend,
            "refId": ref}  # fmt: skip


def _panel(pid: int, title: str, unit: str, targets: list[dict[str, Any]], x: int, y: int) -> dict[str, Any]:
    return {
        "id": pid,
        "type": "timeseries",
        "title": title,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
        "targets": targets,
    }


def dashboard() -> dict[str, Any]:
    """Per pool: p99 TTFT/ITL vs SLO, prefill share per pod, replicas and request rate by node pool, decisions."""

    def latency(which: str) -> list[dict[str, Any]]:
        expr = any_family(lambda f: latency_p99(f, which, "5m", BY_NODE_POOL, _ENGINE_SEL))
        return [
            _target(f"max by (namespace, pool, node_pool) ({expr})", "p99 {{pool}}/{{node_pool}}", "A"),
            _target(f'semipd_slo_target_seconds{{{_SEL}, slo="{which}"}}', "SLO {{pool}}", "B"),
        ]  # fmt: skip

    def share(agent: str, sim: str) -> str:
        by = f"namespace, {POOL}, {NODE_POOL}, pod"
        return f"max by ({by}) ({agent}{{{_ENGINE_SEL}}}) or max by ({by}) ({sim}{{{_ENGINE_SEL}}})"

    split = [
        _target(share(AGENT_SPLIT, SIM_SPLIT), f"prefill {{{{{NODE_POOL}}}}} {{{{pod}}}}", "A"),
        _target(share(AGENT_DECODE, SIM_DECODE), f"decode {{{{{NODE_POOL}}}}} {{{{pod}}}}", "B"),
    ]
    kv = any_family(lambda f: f.metrics.kv_usage_max(by=(*BY_NODE_POOL, "pod"), selector=_ENGINE_SEL))
    experts = _expert_imbalance()
    replicas = f"count by (namespace, {POOL}, {NODE_POOL}) (up{{{_ENGINE_SEL}}} == 1)"
    rate = any_family(lambda f: f.metrics.request_rate("1m", by=BY_NODE_POOL, selector=_ENGINE_SEL))
    switch = f"sum by ({NODE_POOL}, le) (rate({AGENT_SWITCH_SECONDS}_bucket{{{_ENGINE_SEL}}}[$__rate_interval]))"
    switch_duration = [
        _target(f"histogram_quantile({q}, {switch})", f"p{round(q * 100)} {{{{{NODE_POOL}}}}}", ref)
        for q, ref in ((0.5, "A"), (0.99, "B"))
    ]
    panels = [
        _panel(1, "p99 time to first token vs SLO", "s", latency("ttft"), 0, 0),
        _panel(2, "p99 inter-token latency vs SLO", "s", latency("itl"), 12, 0),
        _panel(3, "Prefill and decode share by pod (split over time)", "percentunit", split, 0, 8),
        _panel(4, "Serving replicas by node pool", "short",
               [_target(replicas, f"{{{{{POOL}}}}}/{{{{{NODE_POOL}}}}}", "A")], 12, 8),
        _panel(5, "Autoscaler decisions by action and reason", "short",
               [_target("sum by (action, reason) (increase(semipd_autoscaler_decisions_total[$__rate_interval]))",
                        "{{action}} ({{reason}})", "A")], 0, 16),
        _panel(6, "Requests per second by node pool", "reqps",
               [_target(f"sum by ({POOL}, {NODE_POOL}) ({rate})", f"{{{{{POOL}}}}}/{{{{{NODE_POOL}}}}}", "A")],
               12, 16),
        _panel(7, "Operator reconciles by result", "ops",
               [_target("sum by (result) (rate(semipd_reconcile_total[$__rate_interval]))", "{{result}}", "A")],
               0, 24),
        _panel(8, "Agent split-switch duration (p50, p99)", "s", switch_duration, 12, 24),
        _panel(9, "KV-cache usage by pod", "percentunit",
               [_target(kv, f"{{{{{NODE_POOL}}}}} {{{{pod}}}}", "A")], 0, 32),
        _panel(10, "Expert load imbalance (max / mean tokens per expert, worst layer)", "short",
               [_target(experts, f"{{{{{POOL}}}}}/{{{{{NODE_POOL}}}}}", "A")], 12, 32),
    ]  # fmt: skip

    def variable(name: str, query: str) -> dict[str, Any]:
        return {
            "name": name,
            "type": "query",
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "query": {"query": query, "refId": name},
            "definition": query,
            "includeAll": True,
            "multi": True,
            "refresh": 2,
            "current": {"text": "All", "value": "$__all"},
        }

    return {
        "uid": "semipd-pools",
        "title": "semi-PD inference pools",
        "tags": ["semipd"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,  # shared crosshair: one moment across every panel
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {
            "list": [
                {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"},
                variable("namespace", f"label_values(up{{{ANY_POOL}}}, namespace)"),
                variable("pool", f'label_values(up{{namespace=~"$namespace", {ANY_POOL}}}, {POOL})'),
            ]
        },
        "annotations": {"list": [_annotation(name, actions, colour) for name, actions, colour in ANNOTATIONS]},
        "panels": panels,
    }


ANNOTATIONS = (
    ("Split changes", "SplitChange", "blue"),
    ("Replica scaling", "ScaleOut|ScaleIn|PoolFallback", "orange"),
    ("Placement (KV cache, experts)", "KVPlacement|ExpertRebalance", "purple"),
)
"""Decision annotations: one marker per evaluation that made a decision of these actions, with its reason."""


def _annotation(name: str, actions: str, colour: str) -> dict[str, Any]:
    expr = (f'sum by (pool, action, reason) (changes(semipd_autoscaler_decisions_total{{{_SEL}, '
            f'action=~"{actions}"}}[2m])) > 0')  # fmt: skip
    return {
        "name": name,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "enable": True,
        "iconColor": colour,
        "expr": expr,
        "step": "60s",
        "titleFormat": "{{action}} {{pool}}",
        "textFormat": "{{reason}}",
        "tagKeys": "pool,action,reason",
        "useValueForTime": False,
    }


def _expert_imbalance() -> str:
    """max / mean routed tokens per expert, per layer, worst layer: 1 is perfectly balanced."""
    counters = sorted({c for d in DRIVERS.values() if (c := d.metrics.extra.get("expert_tokens_total"))})
    by = f"namespace, {POOL}, {NODE_POOL}"
    per_expert = " or ".join(f"sum by ({by}, layer, expert) (rate({c}{{{_ENGINE_SEL}}}[5m]))" for c in counters)
    return f"max by ({by}) (max by ({by}, layer) ({per_expert}) / avg by ({by}, layer) ({per_expert}))"


def dashboard_queries(board: Mapping[str, Any]) -> list[str]:
    """Every PromQL expression of a dashboard (panels and variables)."""
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    exprs += [a["expr"] for a in board.get("annotations", {}).get("list", [])]
    return exprs + [v["query"]["query"] for v in board["templating"]["list"] if v.get("type") == "query"]


_LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+), *(?P<label>\w+)\)$")


def grafana_to_promql(expr: str, rate_interval: str = "1m", **variables: str) -> str:
    """A dashboard expression as Prometheus would receive it (variables substituted; default `.*`).

    A variable's `label_values(selector, label)` becomes the equivalent `group by (label) (selector)`."""
    out = expr.replace("$__rate_interval", rate_interval)
    m = _LABEL_VALUES.match(out)
    if m:
        out = f"group by ({m['label']}) ({m['selector']})"
    for name in ("namespace", "pool"):
        out = out.replace(f"${name}", variables.get(name, ".*"))
    return out
