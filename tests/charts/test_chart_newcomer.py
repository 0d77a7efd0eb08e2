"""The chart as a packaged chart meets a new user: metadata, NOTES, the values table, `helm test`."""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from semipd.api.semantics import parse_spec
from semipd.packaging import CHART, KUBE_VERSION, chart_files, stale
from semipd.packaging.chart import CHART_README, VALUES_FILE
from semipd.packaging.chartdocs import documented_keys, values_table
from semipd.packaging.helmtest import main as chart_test_main
from tests.charts.conftest import ROOT, run_helm


def chart_meta() -> dict[str, Any]:
    meta: dict[str, Any] = yaml.safe_load((ROOT / CHART / "Chart.yaml").read_text())
    return meta


def test_chart_yaml_names_home_sources_maintainers_and_icon() -> None:
    meta = chart_meta()
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    assert meta["home"] == urls["Homepage"]
    assert meta["sources"] == [urls["Source"]]
    assert meta["maintainers"]
    assert all(m["name"] for m in meta["maintainers"])
    assert meta["icon"].startswith(meta["home"].replace("github.com", "raw.githubusercontent.com") + "/main/")
    assert (ROOT / meta["icon"].split("/main/", 1)[1]).is_file()


def render_notes(helm: str, tmp_path: Path, *values: str) -> str:
    """NOTES.txt rendered by the real helm (wrapped in a ConfigMap: `helm template` skips NOTES)."""
    chart = tmp_path / "chart"
    shutil.copytree(ROOT / CHART, chart)
    notes = (chart / "templates" / "NOTES.txt").read_text()
    (chart / "templates" / "_notes.tpl").write_text('{{- define "test.notes" -}}\n' + notes + "{{- end }}\n")
    (chart / "templates" / "zz-notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\n"
        'data:\n  notes: {{ include "test.notes" . | quote }}\n'
    )
    args = ["template", "rel", str(chart), "-n", "ops", "--kube-version", KUBE_VERSION, "--skip-tests"]
    proc = run_helm(helm, *args, "--show-only", "templates/zz-notes.yaml", *values)
    assert proc.returncode == 0, proc.stderr
    return str(yaml.safe_load(proc.stdout)["data"]["notes"])


def test_notes_show_commands_not_repository_paths(helm: str, tmp_path: Path) -> None:
    notes = render_notes(helm, tmp_path)
    # A packaged chart has no examples/, docs/ or crds/ next to it: no bare repository paths.
    for line in notes.splitlines():
        for path in re.findall(r"(?<![\w/.:-])(?:examples|docs|crds)/\S+", line):
            raise AssertionError(f"NOTES points at a repository path {path!r}: {line!r}")
    assert "helm test rel -n ops" in notes
    assert "kubectl explain inferencepools.semipd.io.spec" in notes
    assert "kubectl get sipool hello" in notes
    # The pool NOTES offers is a valid InferencePool, as pasted into a shell (heredoc to `YAML`).
    body = notes.split("<<'YAML'\n", 1)[1].split("\nYAML\n", 1)[0]
    doc = yaml.safe_load(body)
    assert doc["apiVersion"] == "semipd.io/v1alpha1"
    assert doc["kind"] == "InferencePool"
    spec, problems = parse_spec(doc["spec"])
    assert spec is not None, problems
    assert not problems
    no_crd = render_notes(helm, tmp_path / "b", "--set", "crds.install=false")
    assert "install inferencepools.semipd.io" in no_crd


def test_values_table_lists_every_documented_key_with_its_default() -> None:
    values_text = (ROOT / VALUES_FILE).read_text()
    readme = (ROOT / CHART_README).read_text()
    keys = [k for k, _ in documented_keys(values_text)]
    assert "operator.prometheusURL" in keys
    assert "monitoring.dashboard.labelValue" in keys
    assert values_table(values_text) in readme
    assert '| `operator.resyncInterval` | string | `"30s"` |' in readme


def test_every_value_is_documented() -> None:
    """Each leaf of values.yaml is described by its own `# --` comment or its parent's."""
    values_text = (ROOT / VALUES_FILE).read_text()
    documented = {k for k, _ in documented_keys(values_text)}

    def leaves(node: Any, prefix: str) -> list[str]:
        if isinstance(node, dict) and node:
            return [leaf for k, v in node.items() for leaf in leaves(v, f"{prefix}{k}.")]
        return [prefix.rstrip(".")]

    values = yaml.safe_load(values_text)
    undocumented = [
        leaf for leaf in leaves(values, "") if not any(leaf == d or leaf.startswith(d + ".") for d in documented)
    ]
    assert not undocumented


def test_values_table_drift_is_caught(tmp_path: Path) -> None:
    for rel in (CHART_README, VALUES_FILE, Path("crds/semipd.io_inferencepools.yaml")):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    files = chart_files(tmp_path)
    assert str(CHART_README) not in stale(tmp_path, {CHART_README: files[CHART_README]})
    values = tmp_path / VALUES_FILE
    values.write_text(values.read_text().replace("# -- Port of Kopf's liveness", "# -- Port of the liveness"))
    assert stale(tmp_path, {CHART_README: chart_files(tmp_path)[CHART_README]}) == [str(CHART_README)]


def test_helm_test_hook_runs_chart_test_with_its_own_narrow_role(helm: str) -> None:
    args = ["template", "rel", str(ROOT / CHART), "-n", "ops", "--kube-version", KUBE_VERSION]
    proc = run_helm(helm, *args, "--show-only", "templates/tests/test-operator.yaml")
    assert proc.returncode == 0, proc.stderr
    objs = {d["kind"]: d for d in yaml.safe_load_all(proc.stdout) if d}
    assert set(objs) == {"ServiceAccount", "Role", "RoleBinding", "Pod"}
    for obj in objs.values():
        assert obj["metadata"]["annotations"]["helm.sh/hook"] == "test"
    rules = {(r["resources"][0], tuple(r["verbs"])) for r in objs["Role"]["rules"]}
    assert rules == {("pods", ("get", "list"))}
    pod = objs["Pod"]["spec"]
    assert pod["serviceAccountName"] == objs["ServiceAccount"]["metadata"]["name"]
    assert pod["restartPolicy"] == "Never"
    command = pod["containers"][0]["command"]
    assert command[:2] == ["semipd", "chart-test"]
    assert "--selector=app.kubernetes.io/instance=rel,app.kubernetes.io/component=operator" in command
    # An install (and so manifests/) does not contain the hook.
    installed = run_helm(helm, *args, "--skip-tests")
    assert "chart-test" not in installed.stdout


def test_chart_test_flags_parse(capsys: Any) -> None:
    with pytest.raises(SystemExit) as exit_:
        chart_test_main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "--selector" in out
    assert "(default: 2m)" in out
