"""Operator settings, read once from the environment with documented defaults.

Every variable is listed in docs/configuration.md; invalid values stop the operator at start with a
message naming the variable, rather than misbehaving later.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from semipd.api.durations import to_seconds
from semipd.api.semantics import DEFAULT_SCRAPE_INTERVAL_S


@dataclass(frozen=True)
class OperatorConfig:
    """Process-wide settings of the operator."""

    namespaces: tuple[str, ...] = ()
    """Namespaces to watch; empty means cluster-wide."""

    resync_interval: float = 30.0
    """Seconds between level-based re-reconciles of every InferencePool (timer)."""

    liveness_endpoint: str = "http://127.0.0.1:8081/healthz"
    """Kopf liveness endpoint URL."""

    metrics_host: str = "127.0.0.1"
    """Address the operator's Prometheus metrics listen on."""

    metrics_port: int = 8080
    """Port of the operator's metrics; 0 disables them."""

    prometheus_url: str = "http://127.0.0.1:9090"
    """Default Prometheus queried for SLO metrics (per-pool override: spec.autoscaling.prometheusURL)."""

    prometheus_allowed_urls: tuple[str, ...] = ()
    """Prometheus URLs a pool's spec.autoscaling.prometheusURL may point under; empty: no override is honoured."""

    scrape_interval: float = DEFAULT_SCRAPE_INTERVAL_S
    """Seconds between Prometheus scrapes of engine pods; spec.slo.window must be at least twice this."""

    field_manager: str = "semipd-operator"
    """Server-side apply field manager for everything the operator owns."""

    stale_after: float = 300.0
    """The liveness probe fails when no reconcile succeeded for this many seconds while pools exist."""

    token_key_file: str | None = None
    """File with the key agent admin tokens are derived from (mounted from a Secret in a real install)."""

    operator_image: str = "semipd-operator:0.1.0"
    """Image of the agent-install init container and of the simulated engine."""

    termination_grace_seconds: int = 60
    """Engine pods' termination grace period (the agent drains requests within it)."""

    pod_annotations: tuple[tuple[str, str], ...] = ()
    """Extra annotations on every engine pod (`k=v,k=v`)."""


ENV_PREFIX = "SEMIPD_"


def load_config(env: Mapping[str, str] | None = None) -> OperatorConfig:
    """Build the config from `SEMIPD_*` variables; raises ValueError naming the bad variable."""
    env = os.environ if env is None else env
    d = OperatorConfig()

    def get(name: str) -> str | None:
        value = env.get(ENV_PREFIX + name)
        return value.strip() if value is not None and value.strip() else None

    def seconds(name: str, default: float) -> float:
        raw = get(name)
        if raw is None:
            return default
        try:
            value = to_seconds(raw)
        except ValueError as err:
            raise ValueError(f"{ENV_PREFIX}{name}: {err}") from None
        if value <= 0:
            raise ValueError(f"{ENV_PREFIX}{name}: must be positive, got {raw!r}")
        return value

    port_raw = get("METRICS_PORT")
    try:
        metrics_port = int(port_raw) if port_raw is not None else d.metrics_port
    except ValueError:
        raise ValueError(f"{ENV_PREFIX}METRICS_PORT: not an integer: {port_raw!r}") from None
    if not 0 <= metrics_port <= 65535:
        raise ValueError(f"{ENV_PREFIX}METRICS_PORT: out of range: {metrics_port}")
    namespaces = tuple(n.strip() for n in (get("NAMESPACES") or "").split(",") if n.strip())
    annotations = []
    for item in (get("POD_ANNOTATIONS") or "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{ENV_PREFIX}POD_ANNOTATIONS: expected key=value, got {item!r}")
        annotations.append((key.strip(), value.strip()))
    grace = seconds("TERMINATION_GRACE", float(d.termination_grace_seconds))
    allowed_urls = tuple(u.strip() for u in (get("PROMETHEUS_ALLOWED_URLS") or "").split(",") if u.strip())
    for url in allowed_urls:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"{ENV_PREFIX}PROMETHEUS_ALLOWED_URLS: not an http(s) URL: {url!r}")
    return OperatorConfig(
        namespaces=namespaces,
        resync_interval=seconds("RESYNC_INTERVAL", d.resync_interval),
        liveness_endpoint=get("LIVENESS_ENDPOINT") or d.liveness_endpoint,
        metrics_host=get("METRICS_HOST") or d.metrics_host,
        metrics_port=metrics_port,
        prometheus_url=get("PROMETHEUS_URL") or d.prometheus_url,
        prometheus_allowed_urls=allowed_urls,
        scrape_interval=seconds("SCRAPE_INTERVAL", d.scrape_interval),
        field_manager=get("FIELD_MANAGER") or d.field_manager,
        stale_after=seconds("STALE_AFTER", d.stale_after),
        token_key_file=get("TOKEN_KEY_FILE"),
        operator_image=get("OPERATOR_IMAGE") or d.operator_image,
        termination_grace_seconds=max(15, round(grace)),
        pod_annotations=tuple(annotations),
    )
