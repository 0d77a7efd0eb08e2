"""The chart's Prometheus rules, built from the engine drivers' PromQL: recording rules for p99
TTFT/ITL and request rate per pool and node pool, the SLIs behind each pool's error budget
(`spec.slo.attainmentTarget`), and the multiwindow burn-rate and health alerts on top of them.
"""

from __future__ import annotations

from typing import Any

from semipd.packaging.families import (
    ANY_POOL,
    BY_NODE_POOL,
    BY_POOL,
    RUNBOOK,
    latency_p99,
    metric_families,
    with_pool_labels,
)

LEVELS = {"pool": BY_POOL, "node_pool": BY_NODE_POOL}
LEVEL_PREFIX = {"pool": "namespace_pool", "node_pool": "namespace_pool_node_pool"}

# The SRE workbook's multiwindow, multi-burn-rate alerts (chapter 5, table 5-8): a burn rate of
# 14.4 spends 2 % of a 30-day error budget in 1 h; 6, 5 % in 6 h; 3 and 1, 10 % in 1 and 3 days.
# Each long window is confirmed by a short one (1/12 of it) so an alert clears soon after recovery.
FAST_BURNS = ((14.4, "1h", "5m"), (6.0, "6h", "30m"))
SLOW_BURNS = ((3.0, "1d", "2h"), (1.0, "3d", "6h"))
SLO_WINDOWS = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")


def record_name(level: str, which: str, window: str) -> str:
    """`level:metric:operations` (Prometheus' recording-rule convention), e.g.
    `namespace_pool:semipd_ttft_seconds:p99_5m`."""
    return f"{LEVEL_PREFIX[level]}:semipd_{which}_seconds:p99_{window}"


REQUEST_RATE = "namespace_pool_node_pool:semipd_requests:rate1m"


def slo_record(which: str, part: str, window: str) -> str:
    """Per-pool SLI series: `good` and `total` (per engine family) and the `errors` ratio."""
    op = f"ratio_rate{window}" if part == "errors" else f"rate{window}"
    return f"namespace_pool:semipd_{which}_slo_{part}:{op}"


def _slo_bucket(which: str, family: str) -> str:
    # max by: two operator replicas briefly exporting the same pool must not make the join ambiguous
    info = f'max by (namespace, pool, bucket_le) (semipd_slo_bucket_info{{slo="{which}", engine_metrics="{family}"}})'
    return f'label_replace({info}, "le", "$1", "bucket_le", "(.+)")'


def slo_recording_rules() -> list[dict[str, Any]]:
    """The SLI of each objective per pool: requests (ITL: inter-token observations) in the bucket at or
    below the objective, over all requests, from each engine family's histogram."""
    rules: list[dict[str, Any]] = []
    for which in ("ttft", "itl"):
        for window in SLO_WINDOWS:
            for fam in metric_families():
                hist = fam.metrics.ttft if which == "ttft" else fam.metrics.itl
                bucket = _slo_bucket(which, fam.name)
                good = with_pool_labels(f"rate({hist}_bucket{{{ANY_POOL}}}[{window}])", BY_POOL)
                total = with_pool_labels(f"rate({hist}_count{{{ANY_POOL}}}[{window}])", BY_POOL)
                labels = {"engine_metrics": fam.name}
                rules.append({"record": slo_record(which, "good", window),
                              "expr": f"sum by (namespace, pool) ({good} * on (namespace, pool, le) group_left "
                                      f"{bucket})", "labels": labels})  # fmt: skip
                rules.append({"record": slo_record(which, "total", window),
                              "expr": f"sum by (namespace, pool) ({total}) and on (namespace, pool) "
                                      f"max by (namespace, pool) ({bucket})", "labels": labels})  # fmt: skip
            rules.append({
                "record": slo_record(which, "errors", window),
                "expr": f"1 - sum by (namespace, pool) ({slo_record(which, 'good', window)}) / "
                        f"sum by (namespace, pool) ({slo_record(which, 'total', window)})",
            })  # fmt: skip
    return rules


def recording_rules() -> list[dict[str, Any]]:
    """p99 TTFT/ITL per pool and per node pool (5m, and 1h per pool), and request rate per node pool."""
    rules: list[dict[str, Any]] = []
    for fam in metric_families():
        labels = {"engine_metrics": fam.name}
        for which in ("ttft", "itl"):
            for level, window in (("pool", "5m"), ("pool", "1h"), ("node_pool", "5m")):
                rules.append(
                    {
                        "record": record_name(level, which, window),
                        "expr": latency_p99(fam, which, window, LEVELS[level]),
                        "labels": labels,
                    }
                )
        rate = fam.metrics.request_rate("1m", by=BY_NODE_POOL, selector=ANY_POOL)
        rules.append({"record": REQUEST_RATE, "expr": with_pool_labels(rate, BY_NODE_POOL), "labels": labels})
    return rules


def _burning(which: str, burns: tuple[tuple[float, str, str], ...]) -> str:
    budget = "(1 - max by (namespace, pool) (semipd_slo_attainment_target_ratio))"
    terms = [
        f"({slo_record(which, 'errors', long)} > on (namespace, pool) ({rate} * {budget}) and on (namespace, pool) "
        f"{slo_record(which, 'errors', short)} > on (namespace, pool) ({rate} * {budget}))"
        for rate, long, short in burns
    ]
    return " or ".join(terms)


POOL_REF = "{{ $labels.namespace }}/{{ $labels.pool }}"


def alert_rules() -> list[dict[str, Any]]:
    """SLO error-budget burn (fast: page; slow: ticket), operator reconcile errors, and missing metrics."""
    alerts: list[dict[str, Any]] = []
    for which, title in (("ttft", "time to first token"), ("itl", "inter-token latency")):
        upper = which.upper()
        alerts.append(
            {
                "alert": f"Semipd{upper}SLOFastBurn",
                "expr": _burning(which, FAST_BURNS),
                "for": "2m",
                "labels": {"severity": "critical"},
                "annotations": {
                    "summary": f"pool {POOL_REF} is spending its {title} error budget fast",
                    "description": f"Requests missing spec.slo.{which}P99 exceed 14.4x the budget "
                    "(1 - attainmentTarget) over 1h and 5m, or 6x over 6h and 30m; the split and replica levers "
                    "are not keeping up (check the pool's conditions and node-pool capacity).",
                },
            }
        )
        alerts.append(
            {
                "alert": f"Semipd{upper}SLOSlowBurn",
                "expr": _burning(which, SLOW_BURNS),
                "for": "15m",
                "labels": {"severity": "warning"},
                "annotations": {
                    "summary": f"pool {POOL_REF} is spending its {title} error budget faster than it accrues",
                    "description": f"Requests missing spec.slo.{which}P99 exceed 3x the budget over 1d and 2h, or "
                    "1x over 3d and 6h; consider a larger maxReplicas or more nodes.",
                },
            }
        )
    alerts += [
        {
            "alert": "SemipdReconcileErrors",
            "expr": 'sum by (namespace, pod) (rate(semipd_reconcile_total{result="error"}[10m])) > 0',
            "for": "10m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "the semipd operator {{ $labels.namespace }}/{{ $labels.pod }} keeps failing reconciles",
                "description": "Reconciles raise errors (API errors, RBAC 403, timeouts); read the operator log.",
            },
        },
        {
            "alert": "SemipdOperatorMetricsMissing",
            "expr": "absent(semipd_reconcile_duration_seconds_count)",
            "for": "10m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "no metrics from the semipd operator",
                "description": "The operator is down or not scraped (PodMonitor, its metrics port).",
            },
        },
        {
            "alert": "SemipdEngineMetricsMissing",
            "expr": f"up{{{ANY_POOL}}} == 0",
            "for": "5m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "engine pod {{ $labels.namespace }}/{{ $labels.pod }} cannot be scraped",
                "description": "Without its metrics the operator holds the pool's splits and never scales it in "
                "(MetricsAvailable=False).",
            },
        },
        {
            "alert": "SemipdObservationsStale",
            "expr": "max by (namespace, pool) (semipd_observation_age_seconds) > 300",
            "for": "5m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "the operator's observations of {{ $labels.namespace }}/{{ $labels.pool }} are stale",
                "description": "Prometheus queries fail or return nothing; decisions are on hold.",
            },
        },
    ]
    return alerts


def with_runbooks(alerts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each alert's `runbook_url`: its own section of docs/operations.md (heading = alert name)."""
    return [
        {**a, "annotations": {**a["annotations"], "runbook_url": f"{RUNBOOK}#{a['alert'].lower()}"}} for a in alerts
    ]


def rule_groups() -> dict[str, Any]:
    """The `spec` of the chart's PrometheusRule."""
    return {
        "groups": [
            {"name": "semipd.recording", "interval": "30s", "rules": recording_rules()},
            {"name": "semipd.slo", "interval": "30s", "rules": slo_recording_rules()},
            {"name": "semipd.alerts", "rules": with_runbooks(alert_rules())},
        ]
    }
