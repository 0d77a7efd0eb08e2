"""Packaging: the generated parts of the Helm chart, and the plain manifests rendered from it.

Generated, never hand-edited (a unit test fails on drift):
- the chart's CRD template, from `crds/semipd.io_inferencepools.yaml` (`chart.py`);
- its Prometheus rules (`rules.py`) and Grafana dashboard (`dashboard.py`), from the engine
  drivers' PromQL (`engines/promql.py`, grouped in `families.py`), so the alerts and panels query
  exactly the series the operator reasons about;
- `manifests/`, a kustomize base rendered by `helm template` of the chart with
  `manifests/helm-values.yaml` (`chart.py`).

CLI: `python -m semipd.packaging sync|check [--root DIR] [--helm PATH]`.
"""

from __future__ import annotations

from semipd.packaging.chart import (
    CHART,
    CRD_SOURCE,
    CRD_TEMPLATE,
    DASHBOARD_FILE,
    KUBE_VERSION,
    MANIFEST_VALUES,
    MANIFESTS,
    NAMESPACE,
    RELEASE,
    RULES_FILE,
    chart_files,
    crd_template,
    default_helm,
    generated_files,
    helm_template,
    main,
    manifest_filename,
    manifests_from_render,
    stale,
    sync,
    write,
)
from semipd.packaging.dashboard import dashboard, dashboard_queries, grafana_to_promql
from semipd.packaging.families import (
    AGENT_SPLIT,
    ANY_POOL,
    BY_NODE_POOL,
    BY_POOL,
    NODE_POOL,
    OPERATOR_METRICS,
    PENDING_OPERATOR_METRICS,
    POOL,
    SIM_SPLIT,
    Family,
    any_family,
    latency_p99,
    metric_families,
    prom_label,
)
from semipd.packaging.rules import alert_rules, record_name, recording_rules, rule_groups, slo_recording_rules

__all__ = [
    "AGENT_SPLIT", "ANY_POOL", "BY_NODE_POOL", "BY_POOL", "CHART", "CRD_SOURCE", "CRD_TEMPLATE",
    "DASHBOARD_FILE", "KUBE_VERSION", "MANIFESTS", "MANIFEST_VALUES", "NAMESPACE", "NODE_POOL",
    "OPERATOR_METRICS", "PENDING_OPERATOR_METRICS", "POOL", "RELEASE", "RULES_FILE", "SIM_SPLIT",
    "Family", "alert_rules", "any_family", "chart_files", "crd_template", "dashboard", "dashboard_queries",
    "default_helm", "generated_files", "grafana_to_promql", "helm_template", "latency_p99", "main",
    "manifest_filename", "manifests_from_render", "metric_families", "prom_label", "record_name",
    "recording_rules", "rule_groups", "slo_recording_rules", "stale", "sync", "write",
]  # fmt: skip
