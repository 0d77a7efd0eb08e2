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
DECISION_SECONDS = Histogram(
    "semipd_autoscaler_decision_duration_seconds",
    "Observe + plan wall time of one evaluation",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
OBSERVATION_AGE = Gauge(
    "semipd_observation_age_seconds", "Age of the newest sample behind the last observation", ["namespace", "pool"]
)
LEADER = Gauge("semipd_leader", "1 while this process holds the leader Lease (or runs without leader election)")
EVENTS_DROPPED = Counter("semipd_events_dropped", "Events not posted because the operator's event queue was full")
API_REQUESTS = Counter(
    "semipd_kube_api_requests", "Kubernetes API requests made by reconciles (watches excluded)", ["verb", "kind"]
)


def serve(host: str, port: int) -> None:
    """Start the metrics HTTP server (port 0 disables it)."""
    if port:
        start_http_server(port, addr=host)
