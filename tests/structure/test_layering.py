"""The layering rule (docs/architecture.md) holds, and a violation of it fails the check.

`lint-imports` reads the contracts in pyproject.toml; `make lint` runs it on the real package. Here it
also runs on a copy of the package with one forbidden import added, which must break a contract.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "semipd"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
MAX_LINES = 450
PENDING_SPLIT: set[str] = {
    # Files still over the limit; each is being split (see the closing notes). The set only shrinks.
    "policy/planner.py",
    "agent/supervisor.py",
}


def lint_imports(package_parent: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(package_parent)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        capture_output=True,
        text=True,
        env=env,
        cwd=package_parent,
        timeout=240,
        check=False,
    )


def copy_package(tmp_path: Path) -> Path:
    shutil.copytree(PACKAGE, tmp_path / "semipd", ignore=shutil.ignore_patterns("__pycache__", "data"))
    (tmp_path / "semipd" / "data").mkdir()
    shutil.copy(PACKAGE / "data" / "__init__.py", tmp_path / "semipd" / "data" / "__init__.py")
    return tmp_path


def test_the_package_keeps_every_contract() -> None:
    out = lint_imports(PACKAGE.parent)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "broken" not in out.stdout.split("Contracts:")[-1].lower().replace("0 broken", "")


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("policy/kvcache.py", "import semipd.sim.fleet.fleet", "never import the simulator"),
        ("perf/latency.py", "import semipd.policy.planner", "imports nothing of ours but the API types"),
        ("agent/httpwire.py", "import pydantic", "standard-library only"),
        ("api/base.py", "import semipd.controller.kube", "Layers"),
    ],
)
def test_a_forbidden_import_breaks_a_contract(tmp_path: Path, module: str, line: str, contract: str) -> None:
    parent = copy_package(tmp_path)
    target = parent / "semipd" / module
    target.write_text(target.read_text() + f"\n{line}  # injected by the test\n")
    out = lint_imports(parent)
    assert out.returncode != 0, out.stdout
    broken = out.stdout.split("Broken contracts")[-1]
    assert contract in " ".join(broken.split()), broken


def test_no_module_is_over_the_line_limit() -> None:
    too_long = {
        str(path.relative_to(PACKAGE)): n
        for path in PACKAGE.rglob("*.py")
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert set(too_long) <= PENDING_SPLIT, f"over {MAX_LINES} lines: {too_long}"
    assert not PENDING_SPLIT - set(too_long), f"split already, drop from PENDING_SPLIT: {PENDING_SPLIT - set(too_long)}"
