"""The generated alerts: a runbook section each, and `promtool test rules` on their behaviour."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from semipd.packaging import rule_groups
from semipd.packaging.families import PROJECT_HOME, RUNBOOK
from tests.charts.conftest import ROOT

PROMTOOL_TESTS = Path(__file__).parent / "promtool"


def github_anchor(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_alert_links_its_runbook_section() -> None:
    anchors = {
        github_anchor(line.lstrip("#"))
        for line in (ROOT / "docs/operations.md").read_text().splitlines()
        if line.startswith("#")
    }
    alerts = [r for g in rule_groups()["groups"] for r in g["rules"] if "alert" in r]
    assert alerts
    for alert in alerts:
        url = alert["annotations"]["runbook_url"]
        page, _, anchor = url.partition("#")
        assert page == RUNBOOK
        assert anchor in anchors, f"{alert['alert']}: no section #{anchor} in docs/operations.md"
    chart = yaml.safe_load((ROOT / "charts/semipd-operator/Chart.yaml").read_text())
    assert chart["home"] == PROJECT_HOME


@pytest.fixture(scope="session")
def promtool() -> str:
    """promtool from e2e/build-binaries.sh (the Prometheus module and version the harness runs)."""
    proc = subprocess.run(
        ["bash", str(ROOT / "e2e" / "build-binaries.sh"), "promtool"], capture_output=True, text=True, timeout=1800
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return str(Path.home() / ".cache" / "semipd" / "bin" / "promtool")


def test_promtool_checks_and_unit_tests_the_generated_rules(promtool: str, tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(rule_groups(), sort_keys=False))
    check = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    tests = sorted(PROMTOOL_TESTS.glob("*.test.yaml"))
    assert tests
    for t in tests:
        shutil.copy(t, tmp_path / t.name)
    proc = subprocess.run(
        [promtool, "test", "rules", *(t.name for t in tests)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def engine_series() -> set[str]:
    """Every series the engine drivers' metric sets name (histograms as _bucket/_sum/_count)."""
    from semipd.engines import DRIVERS

    out: set[str] = set()
    for driver in DRIVERS.values():
        ms = driver.metrics
        for hist in (ms.ttft, ms.itl, ms.e2e):
            out |= {f"{hist}_bucket", f"{hist}_sum", f"{hist}_count"}
        out |= {ms.running, ms.waiting, ms.kv_usage, ms.prompt_tokens, ms.generation_tokens, *ms.extra.values()}
    return out


def test_every_dashboard_query_is_promql_naming_only_exported_series(promtool: str, tmp_path: Path) -> None:
    from prometheus_client import REGISTRY

    import semipd.controller.metrics  # noqa: F401  (registers the operator's metrics)
    from semipd.agent.agentmetrics import AgentMetrics
    from semipd.packaging import PENDING_OPERATOR_METRICS, dashboard, dashboard_queries, grafana_to_promql
    from semipd.packaging.families import SIM_DECODE, SIM_SPLIT

    queries = [grafana_to_promql(q) for q in dashboard_queries(dashboard())]
    # Valid PromQL: promtool parses each as the expression of a recording rule.
    rules = {"groups": [{"name": "dashboard", "rules": [{"record": f"dashboard:q{i}", "expr": q} for i, q in
                                                            enumerate(queries)]}]}  # fmt: skip
    (tmp_path / "dashboard.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    check = subprocess.run([promtool, "check", "rules", str(tmp_path / "dashboard.yaml")], capture_output=True,
                           text=True, timeout=120)  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    # Every selector names a series the operator, the agent, the simulated engine or an engine driver exports.
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}
    operator = {f.name + s for f in REGISTRY.collect() for s in suffixes.get(f.type, ("",))}
    agent_metrics = AgentMetrics("sim", "standby_swap")
    rendered = agent_metrics.render()
    agent = {m.group(1) for m in re.finditer(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", rendered, re.M)}
    agent |= {agent_metrics.prefill_share.name, agent_metrics.decode_share.name}  # gauges render once set
    known = operator | agent | {SIM_SPLIT, SIM_DECODE, "up"} | engine_series() | set(PENDING_OPERATOR_METRICS)
    for q in queries:
        named = set(re.findall(r"(?<![\w:])([a-zA-Z_:][a-zA-Z0-9_:]*)[{[]", q))
        assert named, q
        assert named <= known, f"{named - known} in {q}"


def test_dashboard_shares_its_crosshair_and_shows_agent_switch_durations() -> None:
    from semipd.packaging import dashboard

    board = dashboard()
    assert board["graphTooltip"] == 1
    (switch,) = [p for p in board["panels"] if "switch duration" in p["title"]]
    assert all("semipd_agent_switch_duration_seconds_bucket" in t["expr"] for t in switch["targets"])


def test_dashboard_annotates_split_scale_and_placement_decisions_and_shows_kv_and_expert_panels() -> None:
    from semipd.packaging import dashboard

    board = dashboard()
    notes = {a["name"]: a["expr"] for a in board["annotations"]["list"]}
    assert set(notes) == {"Split changes", "Replica scaling", "Placement (KV cache, experts)"}
    assert 'action=~"SplitChange"' in notes["Split changes"]
    assert "ScaleOut" in notes["Replica scaling"]
    assert "ScaleIn" in notes["Replica scaling"]
    assert "KVPlacement" in notes["Placement (KV cache, experts)"]
    assert "ExpertRebalance" in notes["Placement (KV cache, experts)"]
    assert all(a["textFormat"] == "{{reason}}" for a in board["annotations"]["list"])
    titles = {p["title"]: p for p in board["panels"]}
    (split,) = [p for t, p in titles.items() if t.startswith("Prefill and decode share")]
    assert split["fieldConfig"]["defaults"]["unit"] == "percentunit"  # shares are ratios in 0-1
    assert [t["legendFormat"].split()[0] for t in split["targets"]] == ["prefill", "decode"]
    assert any("KV-cache" in t for t in titles)
    assert any("Expert load imbalance" in t for t in titles)


def test_renamed_metrics_are_gone_from_every_exporter_rule_and_panel() -> None:
    from prometheus_client import generate_latest

    from semipd.agent.agentmetrics import AgentMetrics
    from semipd.packaging import dashboard, dashboard_queries
    from semipd.packaging.families import RENAMED_METRICS
    from semipd.sim.engine.experts import ExpertPlacement
    from semipd.sim.engine.metrics import EngineMetrics

    rules = (ROOT / "charts/semipd-operator/files/prometheus-rules.yaml").read_text()
    agent = AgentMetrics("sim", "standby_swap")
    agent.prefill_share.set(0.5)
    agent.decode_share.set(1.0)
    engine = EngineMetrics("m", [[0.5, 0.5]], ExpertPlacement([[0.5, 0.5]], ep=2, redundant=0))
    engine.prefill_share.set(0.5)
    exported = agent.render() + generate_latest(engine.registry).decode()
    for old, new in RENAMED_METRICS.items():
        assert old not in rules, old
        assert not any(old in q for q in dashboard_queries(dashboard())), old
        assert old not in exported, old
        assert new in (rules if ":" in new else exported), new
    assert "semipd_sim:" not in exported  # colons are for recording rules
    assert "semipd_agent_prefill_share_ratio 0.5" in exported


def test_our_metric_names_pass_promtool_lint(promtool: str) -> None:
    """`promtool check metrics` over everything the operator, the agent and the sim engine export under
    our own names (the sim's SGLang-named series copy upstream's names, colons included, on purpose)."""
    from prometheus_client import REGISTRY, generate_latest

    from semipd.agent.agentmetrics import AgentMetrics
    from semipd.controller.metrics import publish_slo
    from semipd.sim.engine.experts import ExpertPlacement
    from semipd.sim.engine.metrics import EngineMetrics

    publish_slo("ns", "lint", {"ttft": 2.0, "itl": 0.08}, 0.99, {("ttft", "sglang"): "2.0"})
    engine = EngineMetrics("m", [[0.5, 0.5]], ExpertPlacement([[0.5, 0.5]], ep=2, redundant=0))
    text = generate_latest(REGISTRY).decode() + AgentMetrics("sim", "standby_swap").render()
    text += generate_latest(engine.registry).decode()
    ours = "".join(line + "\n" for line in text.splitlines() if "sglang:" not in line)
    for prefix in ("semipd_slo_bucket_info", "semipd_agent_", "semipd_sim_"):
        assert prefix in ours
    lint = subprocess.run([promtool, "check", "metrics"], input=ours, capture_output=True, text=True, timeout=60)
    assert lint.returncode == 0, lint.stdout + lint.stderr
