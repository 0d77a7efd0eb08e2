"""`semipd simulate` end to end on an example manifest (short trace slice)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from semipd.sim.fleet.cli import main

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "sim-mixed-gpu-ascend.yaml"


def test_simulate_prints_results_and_writes_json_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_json, out_png = tmp_path / "r.json", tmp_path / "r.png"
    code = main(["--pool", str(EXAMPLE), "--trace", "azure-conv", "--rate-scale", "2", "--duration", "5m",
                 "--json", str(out_json), "--plot", str(out_png)])  # fmt: skip
    assert code == 0
    text = capsys.readouterr().out
    assert "attainment" in text
    assert "accelerator-hours" in text
    assert "SplitChange" in text
    doc = json.loads(out_json.read_text())
    assert doc["arrivals"] == doc["finished"] + sum(doc["rejected"].values())
    assert doc["timeline"]
    assert doc["actions"]
    assert out_png.stat().st_size > 10_000


def test_bad_manifest_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: ConfigMap\n")
    assert main(["--pool", str(bad), "--trace", "azure-conv"]) == 2
    assert "no InferencePool" in capsys.readouterr().err


def test_unknown_node_pool_in_replicas_or_capacity_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    for flag in ("--replicas", "--capacity"):
        assert main(["--pool", str(EXAMPLE), "--trace", "azure-conv", flag, "foo=2"]) == 2
        err = capsys.readouterr().err
        assert "no node pool 'foo'" in err
        assert "h200" in err


def test_plot_without_matplotlib_is_refused_before_simulating(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    code = main(
        ["--pool", str(EXAMPLE), "--trace", "azure-conv", "--duration", "1m", "--plot", str(tmp_path / "p.png")]
    )
    assert code == 2
    out, err = capsys.readouterr()
    assert "--plot needs matplotlib" in err
    assert "attainment" not in out + err  # nothing was simulated
    assert not (tmp_path / "p.png").exists()


def test_json_dash_writes_the_result_alone_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--pool", str(EXAMPLE), "--trace", "azure-conv", "--duration", "1m", "--json", "-"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["arrivals"] > 0
    assert "attainment" in err
