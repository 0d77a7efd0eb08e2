"""The operator's own Prometheus metrics (exposition via prometheus_client)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

RECONCILES = Counter("semipd_reconcile", "InferencePool reconciles by result", ["result"])
RECONCILE_SECONDS = Histogram(
    "semipd_reconcile_duration_seconds",
    "Wall time of one InferencePool reconcile, from taking its pool's lock to its status written",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
RECONCILE_QUEUE_SECONDS = Histogram(
    "semipd_reconcile_queue_seconds",
    "Time a triggered reconcile waited for its pool's lock (another reconcile of the same pool)",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
INVALID_SPECS = Counter("semipd_invalid_spec", "Reconciles that found an InvalidSpec")
DECISIONS = Counter(
    "semipd_autoscaler_decisions",
    "Autoscaler decisions by pool, action and reason",
    ["namespace", "pool", "action", "reason"],
)
SLO_TARGET = Gauge(
    "semipd_slo_target_seconds",
    "The pool's latency objectives (spec.slo), for alerts and dashboards",
    ["namespace", "pool", "slo"],
)
SLO_OBJECTIVE = Gauge(
    "semipd_slo_attainment_target_ratio",
    "The pool's spec.slo.attainmentTarget: the fraction of requests that must meet each objective",
    ["namespace", "pool"],
)
SLO_BUCKET = Gauge(
    "semipd_slo_bucket_info",
    "1 for the engine histogram bucket (le) at or below each objective, per engine metric family: the "
    "burn-rate rules count requests in that bucket as meeting the objective (bucket_le: the bucket's le; "
    "only histograms may carry le itself)",
    ["namespace", "pool", "slo", "engine_metrics", "bucket_le"],
)
_slo_buckets: dict[tuple[str, str], set[tuple[str, str, str]]] = {}


def publish_slo(
    namespace: str,
    pool: str,
    targets_s: dict[str, float],
    objective: float,
    buckets: dict[tuple[str, str], str],
) -> None:
    """Export a pool's objectives; bucket label sets no longer in force are removed, since a stale
    `semipd_slo_bucket_info` series would count the same requests as good twice."""
    for slo, seconds in targets_s.items():
        SLO_TARGET.labels(namespace=namespace, pool=pool, slo=slo).set(seconds)
    SLO_OBJECTIVE.labels(namespace=namespace, pool=pool).set(objective)
    now = {(slo, family, le) for (slo, family), le in buckets.items()}
    for slo, family, le in _slo_buckets.get((namespace, pool), set()) - now:
        SLO_BUCKET.remove(namespace, pool, slo, family, le)
    for slo, family, le in now:
        SLO_BUCKET.labels(namespace=namespace, pool=pool, slo=slo, engine_metrics=family, bucket_le=le).set(1)
    _slo_buckets[(namespace, pool)] = now


DECISION_SECONDS = Histogram(
    "semipd_autoscaler_decision_duration_seconds",
    "Observe + plan wall time of one evaluation",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
OBSERVATION_AGE = Gauge(
    "semipd_observation_age_seconds", "Age of the newest sample behind the last observation", ["namespace", "pool"]
)
LEADER = Gauge("semipd_leader", "1 while this process holds the leader Lease (or runs without leader election)")
API_REQUESTS = Counter(
    "semipd_kube_api_requests", "Kubernetes API requests made by reconciles (watches excluded)", ["verb", "kind"]
)


def serve(host: str, port: int) -> None:
    """Start the metrics HTTP server (port 0 disables it)."""
    if port:
        start_http_server(port, addr=host)
