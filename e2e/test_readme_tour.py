"""The README's five-minute tour, run verbatim (its bash block, unchanged) on a local control plane.

It runs in a copy of the repository (tracked files, the same virtual environment), so its
`make cluster-up`/`make cluster-down` start and stop a control plane of their own under the copy's
`.run/cluster`, never the one the other e2e tests share.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]


def tour_block() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## A five-minute tour", 1)[1]
    return section.split("```bash\n", 1)[1].split("\n```", 1)[0] + "\n"


def test_tour_block_is_the_one_documented() -> None:
    block = tour_block()
    assert block.startswith("make cluster-up")
    assert block.rstrip().endswith("make cluster-down")
    assert "semipd load" in block


def copy_repo(dest: Path) -> Path:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for rel in filter(None, files.split("\0")):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)  # mtimes kept: make sees the venv as up to date
    (dest / ".venv").symlink_to(ROOT / ".venv")
    return dest


def test_readme_tour_runs_verbatim(tmp_path: Path) -> None:
    repo = copy_repo(tmp_path / "repo")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBECONFIG", "SEMIPD_"))}
    try:
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", tour_block()], cwd=repo, env=env,
                              capture_output=True, text=True, timeout=1500)  # fmt: skip
    finally:
        subprocess.run([str(repo / ".venv/bin/python"), "-m", "e2e.harness", "down"], cwd=repo, env=env,
                       capture_output=True, timeout=300, check=False)  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "inferencepool.semipd.io/demo condition met" in out
    assert "NAME   READY" in proc.stdout or "READY" in proc.stdout
    assert "requests" in proc.stdout  # the load generator's summary
