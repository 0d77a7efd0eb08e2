"""The chart's Prometheus rules, built from the engine drivers' PromQL: recording rules for p99
TTFT/ITL and request rate per pool and node pool, and the alerts on top of them.
"""

from __future__ import annotations

from typing import Any

from semipd.packaging.families import ANY_POOL, BY_NODE_POOL, BY_POOL, latency_p99, metric_families, with_pool_labels

LEVELS = {"pool": BY_POOL, "node_pool": BY_NODE_POOL}


def record_name(level: str, which: str, window: str) -> str:
    return f"semipd:{level}_{which}_p99_seconds:{window}"


def recording_rules() -> list[dict[str, Any]]:
    """p99 TTFT/ITL per pool and per node pool (5m; 1h for slow burn), and request rate per node pool."""
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
        rules.append(
            {
                "record": "semipd:node_pool_requests_per_second:1m",
                "expr": with_pool_labels(rate, BY_NODE_POOL),
                "labels": labels,
            }
        )
    return rules


def _slo_breach(which: str, window: str) -> str:
    return (
        f"{record_name('pool', which, window)} > on (namespace, pool) group_left "
        f'semipd_slo_target_seconds{{slo="{which}"}}'
    )


POOL_REF = "{{ $labels.namespace }}/{{ $labels.pool }}"


def alert_rules() -> list[dict[str, Any]]:
    """SLO burn (fast and slow), operator reconcile errors, and missing metrics."""
    alerts: list[dict[str, Any]] = []
    for which, title in (("ttft", "time to first token"), ("itl", "inter-token latency")):
        upper = which.upper()
        alerts.append(
            {
                "alert": f"Semipd{upper}SLOFastBurn",
                "expr": f"({_slo_breach(which, '5m')}) and on (namespace, pool, engine_metrics) "
                f"({_slo_breach(which, '1h')})",
                "for": "5m",
                "labels": {"severity": "critical"},
                "annotations": {
                    "summary": f"p99 {title} of pool {POOL_REF} is above its SLO",
                    "description": f"p99 {title} over both 5m and 1h exceeds spec.slo.{which}P99; the split and "
                    "replica levers are not keeping up (check the pool's conditions and node-pool capacity).",
                },
            }
        )
        alerts.append(
            {
                "alert": f"Semipd{upper}SLOSlowBurn",
                "expr": _slo_breach(which, "1h"),
                "for": "1h",
                "labels": {"severity": "warning"},
                "annotations": {
                    "summary": f"p99 {title} of pool {POOL_REF} has been above its SLO for an hour",
                    "description": "The error budget is burning slowly; consider a larger maxReplicas or more nodes.",
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


def rule_groups() -> dict[str, Any]:
    """The `spec` of the chart's PrometheusRule."""
    return {
        "groups": [
            {"name": "semipd.recording", "interval": "30s", "rules": recording_rules()},
            {"name": "semipd.alerts", "rules": alert_rules()},
        ]
    }
