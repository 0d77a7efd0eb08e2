"""Prometheus names shared by the rules and the dashboard: pod labels as Prometheus spells them,
the operator's and agent's metric names, and the engine metric families (engines exporting the
same TTFT/ITL histograms), with p99 expressions labelled by pool and node pool.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from semipd.desired import names
from semipd.engines.families import Family as Family
from semipd.engines.families import metric_families as metric_families


def prom_label(kube_label: str) -> str:
    """A pod label as Prometheus names it (labelmap, podTargetLabels): `semipd.io/pool` -> `semipd_io_pool`."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", kube_label)


# The project's home (Chart.yaml `home`, pyproject Homepage); alert runbooks link into its docs.
PROJECT_HOME = "https://github.com/semipd/semipd-operator"
RUNBOOK = f"{PROJECT_HOME}/blob/main/docs/operations.md"

POOL = prom_label(names.POOL_LABEL)
NODE_POOL = prom_label(names.NODE_POOL_LABEL)
BY_POOL = ("namespace", POOL)
BY_NODE_POOL = ("namespace", POOL, NODE_POOL)

# Operator metrics the rules and dashboard use: exported by controller/metrics.py, and the contract
# for what is not exported yet (until it is, the alerts and panels that use it stay empty, not wrong).
OPERATOR_METRICS = {
    "semipd_reconcile_total",
    "semipd_reconcile_duration_seconds_count",
    "semipd_autoscaler_decisions_total",
    "semipd_observation_age_seconds",
    "semipd_slo_target_seconds",
    "semipd_slo_attainment_target_ratio",
    "semipd_slo_bucket_info",
}
PENDING_OPERATOR_METRICS: dict[str, str] = {}
AGENT_SPLIT = "semipd_agent_prefill_share_ratio"
AGENT_DECODE = "semipd_agent_decode_share_ratio"
AGENT_SWITCH_SECONDS = "semipd_agent_switch_duration_seconds"
SIM_SPLIT = "semipd_sim_prefill_share_ratio"
SIM_DECODE = "semipd_sim_decode_share_ratio"
RENAMED_METRICS = {
    "semipd_agent_prefill_percent": AGENT_SPLIT,
    "semipd_agent_decode_percent": AGENT_DECODE,
    "semipd_sim:prefill_percent": SIM_SPLIT,
    "semipd_sim:decode_percent": SIM_DECODE,
    "semipd_sim_expert_balancedness": "semipd_sim_expert_balance_ratio",
    # recording rules, now level:metric:operations
    "semipd:pool_ttft_p99_seconds:5m": "namespace_pool:semipd_ttft_seconds:p99_5m",
    "semipd:pool_ttft_p99_seconds:1h": "namespace_pool:semipd_ttft_seconds:p99_1h",
    "semipd:pool_itl_p99_seconds:5m": "namespace_pool:semipd_itl_seconds:p99_5m",
    "semipd:pool_itl_p99_seconds:1h": "namespace_pool:semipd_itl_seconds:p99_1h",
    "semipd:node_pool_ttft_p99_seconds:5m": "namespace_pool_node_pool:semipd_ttft_seconds:p99_5m",
    "semipd:node_pool_itl_p99_seconds:5m": "namespace_pool_node_pool:semipd_itl_seconds:p99_5m",
    "semipd:node_pool_requests_per_second:1m": "namespace_pool_node_pool:semipd_requests:rate1m",
}
"""Names gone in v1alpha1 (no alias is exported): shares are ratios in 0-1, and colons are for recording
rules only (every other `semipd_sim:` series became `semipd_sim_`)."""


def with_pool_labels(expr: str, by: Sequence[str]) -> str:
    """Copy `semipd_io_pool` / `semipd_io_node_pool` into plain `pool` / `node_pool` labels."""
    out = f'label_replace({expr}, "pool", "$1", "{POOL}", "(.+)")'
    if NODE_POOL in by:
        out = f'label_replace({out}, "node_pool", "$1", "{NODE_POOL}", "(.+)")'
    return out


ANY_POOL = f'{POOL}!=""'


def latency_p99(family: Family, which: str, window: str, by: Sequence[str], selector: str = ANY_POOL) -> str:
    """p99 TTFT or ITL of one engine family, labelled with pool (and node_pool)."""
    quantile: Callable[..., str] = family.metrics.ttft_quantile if which == "ttft" else family.metrics.itl_quantile
    return with_pool_labels(quantile(0.99, window, by=by, selector=selector), by)


def any_family(build: Callable[[Family], str]) -> str:
    """One expression over every engine family (`or`: a node pool runs exactly one engine)."""
    return " or ".join(f"({build(f)})" for f in metric_families())
