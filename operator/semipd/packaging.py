"""Packaging: the generated parts of the Helm chart, and the plain manifests rendered from it.

Generated, never hand-edited (a unit test fails on drift):
- the chart's CRD template, from `crds/semipd.io_inferencepools.yaml`;
- its Prometheus rules and Grafana dashboard, from the engine drivers' PromQL (`engines/promql.py`),
  so the alerts and panels query exactly the series the operator reasons about;
- `manifests/`, a kustomize base rendered by `helm template` of the chart with `manifests/helm-values.yaml`.

CLI: `python -m semipd.packaging sync|check [--root DIR] [--helm PATH]`.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from semipd.desired import names
from semipd.engines import DRIVERS, MetricSet

CHART = Path("charts/semipd-operator")
CRD_SOURCE = Path("crds/semipd.io_inferencepools.yaml")
CRD_TEMPLATE = CHART / "templates/crd/semipd.io_inferencepools.yaml"
RULES_FILE = CHART / "files/prometheus-rules.yaml"
DASHBOARD_FILE = CHART / "files/grafana-dashboard.json"
MANIFESTS = Path("manifests")
MANIFEST_VALUES = MANIFESTS / "helm-values.yaml"
RELEASE = "semipd-operator"
# Rendered for the Kubernetes version the e2e control plane runs (a `go install`-built helm otherwise
# assumes v1.20, below the chart's kubeVersion).
KUBE_VERSION = "1.35.4"
NAMESPACE = "semipd-system"

# Labels the chart's `semipd-operator.labels` helper sets; the CRD's own copies of them are dropped.
_HELPER_LABELS = {"app.kubernetes.io/name", "app.kubernetes.io/part-of", "app.kubernetes.io/instance"}
# Helm's own bookkeeping, meaningless (or misleading) in plain manifests.
_HELM_ONLY_LABELS = {"helm.sh/chart", "app.kubernetes.io/managed-by"}
_HELM_ONLY_ANNOTATIONS = {"helm.sh/resource-policy"}

# --- Prometheus label names ------------------------------------------------------------------------


def prom_label(kube_label: str) -> str:
    """A pod label as Prometheus names it (labelmap, podTargetLabels): `semipd.io/pool` -> `semipd_io_pool`."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", kube_label)


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
}
PENDING_OPERATOR_METRICS = {
    "semipd_slo_target_seconds": "gauge {namespace, pool, slo=ttft|itl}: the pool's spec.slo target in seconds",
}
AGENT_SPLIT = "semipd_agent_prefill_percent"
SIM_SPLIT = "semipd_sim:prefill_percent"


# --- engine metric families ------------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    """Engines exporting the same histograms (e.g. `sim` and `sglang-semipd` both export SGLang's)."""

    name: str
    kinds: tuple[str, ...]
    metrics: MetricSet


def metric_families() -> list[Family]:
    """One family per distinct TTFT/ITL histogram pair among the engine drivers."""
    groups: dict[tuple[str, str], list[str]] = {}
    sets: dict[tuple[str, str], MetricSet] = {}
    for kind in sorted(DRIVERS):
        ms = DRIVERS[kind].metrics
        key = (ms.ttft, ms.itl)
        groups.setdefault(key, []).append(kind)
        sets.setdefault(key, ms)
    out = []
    for key, kinds in groups.items():
        name = key[0].split(":", 1)[0] if ":" in key[0] else kinds[0]
        out.append(Family(name, tuple(kinds), sets[key]))
    return sorted(out, key=lambda f: f.name)


def _with_pool_labels(expr: str, by: Sequence[str]) -> str:
    """Copy `semipd_io_pool` / `semipd_io_node_pool` into plain `pool` / `node_pool` labels."""
    out = f'label_replace({expr}, "pool", "$1", "{POOL}", "(.+)")'
    if NODE_POOL in by:
        out = f'label_replace({out}, "node_pool", "$1", "{NODE_POOL}", "(.+)")'
    return out


ANY_POOL = f'{POOL}!=""'


def latency_p99(family: Family, which: str, window: str, by: Sequence[str], selector: str = ANY_POOL) -> str:
    """p99 TTFT or ITL of one engine family, labelled with pool (and node_pool)."""
    quantile: Callable[..., str] = family.metrics.ttft_quantile if which == "ttft" else family.metrics.itl_quantile
    return _with_pool_labels(quantile(0.99, window, by=by, selector=selector), by)


def any_family(build: Callable[[Family], str]) -> str:
    """One expression over every engine family (`or`: a node pool runs exactly one engine)."""
    return " or ".join(f"({build(f)})" for f in metric_families())


# --- Prometheus rules -------------------------------------------------------------------------------

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
                "expr": _with_pool_labels(rate, BY_NODE_POOL),
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


# --- Grafana dashboard ------------------------------------------------------------------------------

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

    split = (
        f"max by (namespace, {POOL}, {NODE_POOL}, pod) ({AGENT_SPLIT}{{{_ENGINE_SEL}}}) or "
        f"max by (namespace, {POOL}, {NODE_POOL}, pod) ({SIM_SPLIT}{{{_ENGINE_SEL}}})"
    )
    replicas = f"count by (namespace, {POOL}, {NODE_POOL}) (up{{{_ENGINE_SEL}}} == 1)"
    rate = any_family(lambda f: f.metrics.request_rate("1m", by=BY_NODE_POOL, selector=_ENGINE_SEL))
    panels = [
        _panel(1, "p99 time to first token vs SLO", "s", latency("ttft"), 0, 0),
        _panel(2, "p99 inter-token latency vs SLO", "s", latency("itl"), 12, 0),
        _panel(3, "Prefill share by pod (split over time)", "percent",
               [_target(split, f"{{{{{NODE_POOL}}}}} {{{{pod}}}}", "A")], 0, 8),
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
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {
            "list": [
                {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"},
                variable("namespace", f"label_values(up{{{ANY_POOL}}}, namespace)"),
                variable("pool", f'label_values(up{{namespace=~"$namespace", {ANY_POOL}}}, {POOL})'),
            ]
        },
        "panels": panels,
    }


def dashboard_queries(board: Mapping[str, Any]) -> list[str]:
    """Every PromQL expression of a dashboard (panels and variables)."""
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
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


# --- CRD template -----------------------------------------------------------------------------------


def _dump(obj: Any) -> str:
    return yaml.safe_dump(obj, sort_keys=False, width=120, allow_unicode=True)


def _indent(text: str, spaces: int) -> str:
    pad = " " * spaces
    return "".join(pad + line if line.strip() else line for line in text.splitlines(keepends=True))


def crd_template(crd_text: str) -> str:
    """The chart's CRD template: the generated CRD behind `crds.install`, kept on uninstall when `crds.keep`."""
    if "{{" in crd_text or "}}" in crd_text:
        raise ValueError(f"{CRD_SOURCE}: contains Go-template delimiters; escape them before templating")
    crd = yaml.safe_load(crd_text)
    meta = crd["metadata"]
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in _HELPER_LABELS}
    annotations = meta.get("annotations") or {}
    body = {k: v for k, v in crd.items() if k not in ("apiVersion", "kind", "metadata")}
    lines = [
        f"{{{{- /* Generated by `python -m semipd.packaging sync` from {CRD_SOURCE}. Do not edit. */}}}}",
        "{{- if .Values.crds.install }}",
        f"apiVersion: {crd['apiVersion']}",
        f"kind: {crd['kind']}",
        "metadata:",
        f"  name: {meta['name']}",
        "  labels:",
        '    {{- include "semipd-operator.labels" . | nindent 4 }}',
    ]
    if labels:
        lines.append(_indent(_dump(labels), 4).rstrip("\n"))
    keep = [
        "    {{- if .Values.crds.keep }}",
        "    # Helm never upgrades a chart's crds/ directory, so the CRD is a template; keep it on",
        "    # uninstall, because deleting a CRD deletes every InferencePool (and so every engine pod).",
        "    helm.sh/resource-policy: keep",
        "    {{- end }}",
    ]
    if annotations:
        lines += ["  annotations:", *keep, _indent(_dump(annotations), 4).rstrip("\n")]
    else:
        lines += ["  {{- if .Values.crds.keep }}", "  annotations:", *keep[1:-1], "  {{- end }}"]
    lines += [_dump(body).rstrip("\n"), "{{- end }}", ""]
    return "\n".join(lines)


# --- manifests ----------------------------------------------------------------------------------------


def _strip_helm(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    for key, drop in (("labels", _HELM_ONLY_LABELS), ("annotations", _HELM_ONLY_ANNOTATIONS)):
        kept = {k: v for k, v in (meta.get(key) or {}).items() if k not in drop}
        if kept:
            meta[key] = kept
        else:
            meta.pop(key, None)
    return obj


def manifest_filename(obj: Mapping[str, Any]) -> str:
    """`<kind>-<name>.yaml`, lowercase (one object per file keeps diffs readable)."""
    return f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"


HEADER = (
    "# Generated by `python -m semipd.packaging sync`: `helm template` of charts/semipd-operator with\n"
    "# manifests/helm-values.yaml. Do not edit; change the chart and re-run.\n"
)


def manifests_from_render(rendered: str) -> dict[str, str]:
    """File name -> content of the kustomize base, from `helm template` output."""
    objects = [_strip_helm(d) for d in yaml.safe_load_all(rendered) if d]
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    files: dict[str, str] = {}
    for obj in [namespace, *objects]:
        name = manifest_filename(obj)
        if name in files:
            raise ValueError(f"two rendered objects map to {name}")
        files[name] = HEADER + _dump(obj)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": NAMESPACE,
        "resources": sorted(files),
    }
    files["kustomization.yaml"] = HEADER + _dump(kustomization)
    return files


def helm_template(helm: str, root: Path, values: Path, *extra: str) -> str:
    """`helm template` of the chart (raises with helm's stderr on failure)."""
    cmd = [helm, "template", RELEASE, str(root / CHART), "--namespace", NAMESPACE, "--values", str(values)]
    cmd += ["--kube-version", KUBE_VERSION, *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr}")
    return proc.stdout


# --- sync / check -------------------------------------------------------------------------------------


def chart_files(root: Path) -> dict[Path, str]:
    """The chart's generated files (relative path -> content)."""
    return {
        CRD_TEMPLATE: crd_template((root / CRD_SOURCE).read_text()),
        RULES_FILE: "# Generated by `python -m semipd.packaging sync` from the engine drivers' PromQL. Do not edit.\n"
        + _dump(rule_groups()),
        DASHBOARD_FILE: json.dumps(dashboard(), indent=2, sort_keys=False) + "\n",
    }


def generated_files(root: Path, helm: str) -> dict[Path, str]:
    """Everything generated: the chart parts first (manifests are rendered from the synced chart)."""
    out = chart_files(root)
    rendered = manifests_from_render(helm_template(helm, root, root / MANIFEST_VALUES))
    out.update({MANIFESTS / k: v for k, v in rendered.items()})
    return out


def stale(root: Path, files: Mapping[Path, str], owned_dirs: Sequence[Path] = ()) -> list[str]:
    """Paths whose content differs from `files`, plus leftover generated YAML in `owned_dirs`."""
    out = [str(p) for p, text in files.items() if not (root / p).exists() or (root / p).read_text() != text]
    for d in owned_dirs:
        for path in sorted((root / d).glob("*.yaml")):
            rel = path.relative_to(root)
            if rel not in files and rel != MANIFEST_VALUES:
                out.append(f"{rel} (not generated any more)")
    return out


def write(root: Path, files: Mapping[Path, str], owned_dirs: Sequence[Path] = ()) -> list[Path]:
    """Write `files`; delete generated YAML in `owned_dirs` that is no longer produced."""
    changed = []
    for rel, text in files.items():
        path = root / rel
        if not path.exists() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            changed.append(rel)
    for d in owned_dirs:
        for path in (root / d).glob("*.yaml"):
            rel = path.relative_to(root)
            if rel not in files and rel != MANIFEST_VALUES:
                path.unlink()
                changed.append(rel)
    return changed


def sync(root: Path, helm: str) -> list[Path]:
    """Rewrite every generated file; the chart first, since manifests are rendered from it."""
    changed = write(root, chart_files(root))
    rendered = generated_files(root, helm)
    changed += write(root, {p: t for p, t in rendered.items() if p.parts[0] == MANIFESTS.name}, [MANIFESTS])
    return changed


def default_helm() -> str:
    cached = Path.home() / ".cache" / "semipd" / "bin" / "helm"
    return str(cached) if cached.exists() else "helm"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="semipd package", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["sync", "check"], help="rewrite the generated files, or fail if stale")
    parser.add_argument("--root", default=".", help="repository root (default: .)")
    parser.add_argument("--helm", default=default_helm(), help="helm binary (default: ~/.cache/semipd/bin/helm)")
    args = parser.parse_args(argv)
    root = Path(args.root)
    if args.action == "sync":
        for rel in sync(root, args.helm):
            print(rel)
        return 0
    problems = stale(root, generated_files(root, args.helm), [MANIFESTS])
    for p in problems:
        print(f"stale: {p} (run `python -m semipd.packaging sync`)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
