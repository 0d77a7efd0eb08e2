"""Fixtures for the chart tests: the real helm binary (built by the project's script) and a renderer."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from semipd.packaging import CHART, KUBE_VERSION

ROOT = Path(__file__).resolve().parents[2]
Render = Callable[..., list[dict[str, Any]]]


@pytest.fixture(scope="session")
def helm() -> str:
    """helm from e2e/build-binaries.sh (seconds when cached; a cold `go install` takes minutes)."""
    proc = subprocess.run(
        ["bash", str(ROOT / "e2e" / "build-binaries.sh"), "helm"], capture_output=True, text=True, timeout=1800
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    path = Path.home() / ".cache" / "semipd" / "bin" / "helm"
    assert path.exists(), proc.stderr[-3000:]
    return str(path)


def run_helm(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm, *args], capture_output=True, text=True, timeout=120)


def template_args(values: dict[str, Any] | None = None, release: str = "rel", namespace: str = "ops") -> list[str]:
    args = [
        "template",
        release,
        str(ROOT / CHART),
        "--namespace",
        namespace,
        "--kube-version",
        KUBE_VERSION,
        "--skip-tests",
    ]
    if values:
        args += ["--values", "-"]
    return args


@pytest.fixture
def render(helm: str) -> Render:
    """`helm template` of the chart with `values`; the rendered objects (fails the test on a helm error)."""

    def _render(values: dict[str, Any] | None = None, **kw: str) -> list[dict[str, Any]]:
        proc = subprocess.run(
            [helm, *template_args(values, **kw)],
            input=yaml.safe_dump(values or {}),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        return [d for d in yaml.safe_load_all(proc.stdout) if d]

    return _render


def one(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"{len(found)} {kind} objects named {name}: {[o['metadata']['name'] for o in found]}"
    return found[0]
