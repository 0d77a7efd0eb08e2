"""The agent zipapp is self-contained: standard library only, runs on bare interpreters down to 3.9."""

from __future__ import annotations

import ast
import shutil
import signal
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from semipd.agent.build import build_zipapp
from semipd.agent.build import main as build_main
from semipd.sim.engine.localpod import LocalPod, PodOptions


def find_python39() -> str | None:
    candidates = [*sorted(Path("/root/.pyenv/versions").glob("3.9*/bin/python3.9")), shutil.which("python3.9")]
    for candidate in candidates:
        if candidate and subprocess.run([str(candidate), "-c", "pass"], capture_output=True).returncode == 0:
            return str(candidate)
    return None


PY39 = find_python39()


@pytest.fixture(scope="module")
def pyz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_zipapp(tmp_path_factory.mktemp("pyz") / "agent.pyz")


def test_archive_holds_only_the_agent(pyz: Path) -> None:
    with zipfile.ZipFile(pyz) as zf:
        names = set(zf.namelist())
    assert "__main__.py" in names
    assert "semipd/__init__.py" in names
    assert "semipd/agent/__main__.py" in names
    assert "semipd/agent/supervisor.py" in names
    assert all(n in ("__main__.py", "semipd/__init__.py") or n.startswith("semipd/agent/") for n in names)
    assert "semipd/agent/build.py" not in names
    assert pyz.read_bytes().startswith(b"#!/usr/bin/env python3\n")
    assert pyz.stat().st_mode & 0o111


def test_every_import_is_stdlib_or_the_agent(pyz: Path) -> None:
    with zipfile.ZipFile(pyz) as zf:
        for name in zf.namelist():
            tree = ast.parse(zf.read(name).decode())
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    roots = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    roots = [node.module]
                else:
                    continue
                for mod in roots:
                    top = mod.split(".")[0]
                    assert top in sys.stdlib_module_names or mod.startswith("semipd.agent"), (name, mod)


def test_build_is_reproducible_and_cli_works(tmp_path: Path, pyz: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "again.pyz"
    assert build_main([str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert out.read_bytes() == pyz.read_bytes()


INTERPRETERS = [pytest.param(sys.executable, id="venv-python")]
INTERPRETERS.append(
    pytest.param(str(PY39), id="python3.9")
    if PY39
    else pytest.param("python3.9", id="python3.9", marks=pytest.mark.skip(reason="no python3.9 on this machine"))
)


@pytest.mark.parametrize("python", INTERPRETERS)
def test_zipapp_runs_isolated_and_switches(pod_factory: Callable[..., LocalPod], pyz: Path, python: str) -> None:
    # -I -S: no site-packages, no PYTHONPATH, no user site: only the standard library is importable.
    probe = subprocess.run([python, "-I", "-S", "-c", "import aiohttp"], capture_output=True)
    assert probe.returncode != 0, "the isolated interpreter must not see third-party packages"
    pod = pod_factory(PodOptions(speedup=20.0, agent_command=[python, "-I", "-S", str(pyz)]))
    status, body = pod.put_split(70)
    assert status == 200, pod.log_tail()
    assert body["prefillPercent"] == 70
    pod.signal(signal.SIGTERM)
    assert pod.wait(30) == 0
