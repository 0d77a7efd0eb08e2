"""Generated packaging files: no drift from their sources, and rules/dashboard built from the drivers' PromQL."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml
from prometheus_client import REGISTRY, generate_latest

import semipd.controller.metrics  # noqa: F401  (registers the operator's metrics)
from semipd.agent.agentmetrics import AgentMetrics
from semipd.engines import DRIVERS
from semipd.engines.sim import SIM_METRICS
from semipd.packaging import (
    AGENT_SPLIT,
    BY_NODE_POOL,
    BY_POOL,
    CHART,
    CRD_SOURCE,
    CRD_TEMPLATE,
    MANIFEST_VALUES,
    MANIFESTS,
    OPERATOR_METRICS,
    PENDING_OPERATOR_METRICS,
    SIM_SPLIT,
    alert_rules,
    crd_template,
    dashboard,
    dashboard_queries,
    generated_files,
    grafana_to_promql,
    manifests_from_render,
    metric_families,
    recording_rules,
    rule_groups,
    slo_recording_rules,
    stale,
    sync,
)
from tests.charts.conftest import ROOT


def test_generated_files_are_current(helm: str) -> None:
    """Fails when crds/, the chart or the drivers changed without `python -m semipd.packaging sync`."""
    assert stale(ROOT, generated_files(ROOT, helm), [MANIFESTS]) == []


def test_drift_is_detected_and_sync_repairs_it(helm: str, tmp_path: Path) -> None:
    for rel in (CRD_SOURCE.parent, CHART, MANIFESTS):
        shutil.copytree(ROOT / rel, tmp_path / rel)
    (tmp_path / CRD_TEMPLATE).write_text((tmp_path / CRD_TEMPLATE).read_text().replace("sipool", "sip"))
    (tmp_path / MANIFESTS / "leftover.yaml").write_text("kind: ConfigMap\n")
    files = generated_files(tmp_path, helm)
    problems = stale(tmp_path, files, [MANIFESTS])
    assert str(CRD_TEMPLATE) in problems
    assert f"{MANIFESTS / 'leftover.yaml'} (not generated any more)" in problems
    assert sync(tmp_path, helm)
    assert stale(tmp_path, generated_files(tmp_path, helm), [MANIFESTS]) == []
    assert (tmp_path / MANIFEST_VALUES).exists(), "the values input is never deleted"


def test_manifests_are_a_kustomize_base_without_helm_bookkeeping() -> None:
    files = sorted(p.name for p in (ROOT / MANIFESTS).glob("*.yaml"))
    kustomization = yaml.safe_load((ROOT / MANIFESTS / "kustomization.yaml").read_text())
    assert kustomization["namespace"] == "semipd-system"
    assert sorted(kustomization["resources"]) == [
        f for f in files if f not in ("kustomization.yaml", "helm-values.yaml")
    ]
    kinds = set()
    for name in kustomization["resources"]:
        obj = yaml.safe_load((ROOT / MANIFESTS / name).read_text())
        kinds.add(obj["kind"])
        labels = obj["metadata"].get("labels") or {}
        assert not {"helm.sh/chart", "app.kubernetes.io/managed-by"} & set(labels), name
        assert "helm.sh/resource-policy" not in (obj["metadata"].get("annotations") or {}), name
    # The token key cannot be random in committed YAML: the base expects an existing Secret.
    assert "Secret" not in kinds
    assert {"Namespace", "CustomResourceDefinition", "ClusterRole", "Deployment", "ServiceAccount"} <= kinds


def test_manifests_from_render_splits_objects_and_refuses_collisions() -> None:
    rendered = "---\nkind: ConfigMap\napiVersion: v1\nmetadata: {name: a, labels: {helm.sh/chart: x, k: v}}\n---\n"
    files = manifests_from_render(rendered)
    assert set(files) == {"namespace-semipd-system.yaml", "configmap-a.yaml", "kustomization.yaml"}
    assert yaml.safe_load(files["configmap-a.yaml"])["metadata"]["labels"] == {"k": "v"}
    with pytest.raises(ValueError, match=r"configmap-a\.yaml"):
        manifests_from_render(rendered + rendered)


def test_crd_template_refuses_go_template_delimiters() -> None:
    text = (ROOT / CRD_SOURCE).read_text().replace("sipool", "{{ sipool }}")
    with pytest.raises(ValueError, match="Go-template"):
        crd_template(text)


# --- rules and dashboard ----------------------------------------------------------------------------


def test_every_engine_kind_is_in_exactly_one_metric_family() -> None:
    families = metric_families()
    kinds = [k for f in families for k in f.kinds]
    assert sorted(kinds) == sorted(DRIVERS)
    by_name = {f.name: set(f.kinds) for f in families}
    assert {"sim", "sglang-semipd"} <= by_name["sglang"]
    assert len({(f.metrics.ttft, f.metrics.itl) for f in families}) == len(families)


def test_recording_rules_are_the_drivers_p99_queries() -> None:
    rules = recording_rules()
    for fam in metric_families():
        mine = [r for r in rules if r["labels"]["engine_metrics"] == fam.name]
        records = {r["record"] for r in mine}
        expected = {f"{prefix}:semipd_{w}_seconds:p99_{win}" for w in ("ttft", "itl")
                    for prefix, win in (("namespace_pool", "5m"), ("namespace_pool", "1h"),
                                        ("namespace_pool_node_pool", "5m"))}  # fmt: skip
        assert records == expected | {"namespace_pool_node_pool:semipd_requests:rate1m"}
        exprs = {r["record"]: r["expr"] for r in mine}
        sel = 'semipd_io_pool!=""'
        assert (
            fam.metrics.ttft_quantile(0.99, "5m", by=BY_POOL, selector=sel)
            in exprs["namespace_pool:semipd_ttft_seconds:p99_5m"]
        )
        assert (
            fam.metrics.itl_quantile(0.99, "1h", by=BY_POOL, selector=sel)
            in exprs["namespace_pool:semipd_itl_seconds:p99_1h"]
        )
        node = exprs["namespace_pool_node_pool:semipd_itl_seconds:p99_5m"]
        assert fam.metrics.itl_quantile(0.99, "5m", by=BY_NODE_POOL, selector=sel) in node
        assert '"node_pool", "$1", "semipd_io_node_pool"' in node


def test_sglang_histograms_are_what_the_sim_family_records() -> None:
    sglang = next(r for r in recording_rules() if r["labels"]["engine_metrics"] == "sglang")
    assert "sglang:time_to_first_token_seconds_bucket" in sglang["expr"]
    itl = [r for r in recording_rules() if r["labels"]["engine_metrics"] == "sglang" and "_itl_" in r["record"]]
    assert all("sglang:inter_token_latency_seconds_bucket" in r["expr"] for r in itl)


def test_alerts_cover_slo_burn_operator_errors_and_missing_metrics() -> None:
    alerts = {a["alert"]: a for a in alert_rules()}
    assert {
        "SemipdTTFTSLOFastBurn", "SemipdTTFTSLOSlowBurn", "SemipdITLSLOFastBurn", "SemipdITLSLOSlowBurn",
        "SemipdReconcileErrors", "SemipdOperatorMetricsMissing", "SemipdEngineMetricsMissing",
    } <= set(alerts)  # fmt: skip
    assert 'semipd_reconcile_total{result="error"}' in alerts["SemipdReconcileErrors"]["expr"]
    for a in alerts.values():
        assert a["labels"]["severity"] in ("warning", "critical")
        assert a["annotations"]["summary"]
        assert a["for"]
    recorded = {r["record"] for r in recording_rules() + slo_recording_rules()}
    for a in alerts.values():
        for used in re.findall(r"[a-z_]+:[a-z_0-9]+:[0-9a-z_]+", a["expr"]):
            assert used in recorded, f"{a['alert']} uses unrecorded {used}"
    assert "semipd_slo_attainment_target_ratio" in alerts["SemipdTTFTSLOFastBurn"]["expr"]


def exported_metric_names() -> set[str]:
    text = generate_latest(REGISTRY).decode()
    return {m.group(1) for m in re.finditer(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{| )", text, re.M)} | {
        m.group(1) for m in re.finditer(r"^# TYPE (\S+)", text, re.M)
    }


def referenced_operator_metrics(exprs: list[str]) -> set[str]:
    found = set()
    for expr in exprs:
        for name in re.findall(r"(?<![:\w])(semipd_[a-z_]+)", expr):
            if not name.startswith(("semipd_io_", "semipd_agent_", "semipd_sim")):
                found.add(name)
    return found


def test_operator_metrics_used_exist_or_are_the_documented_contract() -> None:
    exprs = [r["expr"] for g in rule_groups()["groups"] for r in g["rules"]] + dashboard_queries(dashboard())
    used = referenced_operator_metrics(exprs)
    exported = exported_metric_names()
    assert exported >= OPERATOR_METRICS
    assert used <= exported | set(PENDING_OPERATOR_METRICS), used - exported - set(PENDING_OPERATOR_METRICS)
    assert "semipd_reconcile_total" in used


def test_split_series_exist_in_agent_and_sim_metrics() -> None:
    assert AgentMetrics("sim", "standby_swap").prefill_share.name == AGENT_SPLIT
    assert SIM_SPLIT in SIM_METRICS.extra.values()


def test_dashboard_has_the_panels_per_pool() -> None:
    board = dashboard()
    titles = [p["title"] for p in board["panels"]]
    for needed in ("time to first token vs SLO", "inter-token latency vs SLO", "Prefill and decode share",
                   "replicas by node pool", "decisions"):  # fmt: skip
        assert any(needed.lower() in t.lower() for t in titles), needed
    variables = {v["name"] for v in board["templating"]["list"]}
    assert variables == {"datasource", "namespace", "pool"}
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for p in board["panels"]:
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}"


def test_grafana_expressions_translate_to_promql() -> None:
    expr = 'sum(rate(x{namespace=~"$namespace", pool=~"$pool"}[$__rate_interval]))'
    assert grafana_to_promql(expr, namespace="ml") == 'sum(rate(x{namespace=~"ml", pool=~".*"}[1m]))'
    variable = 'label_values(up{namespace=~"$namespace", semipd_io_pool!=""}, semipd_io_pool)'
    assert (
        grafana_to_promql(variable, namespace="ml")
        == 'group by (semipd_io_pool) (up{namespace=~"ml", semipd_io_pool!=""})'
    )


def test_packaging_modules_stay_small() -> None:
    """The packaging code is split by seam (the project's limit is 450 lines a file)."""
    sizes = {p.name: len(p.read_text().splitlines()) for p in (ROOT / "operator/semipd/packaging").glob("*.py")}
    assert {"chart.py", "rules.py", "dashboard.py", "families.py"} <= set(sizes)
    assert max(sizes.values()) <= 450, sizes
