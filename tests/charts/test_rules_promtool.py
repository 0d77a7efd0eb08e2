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
