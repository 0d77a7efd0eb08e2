"""A wheel built from the project carries its data: `semipd simulate --trace mooncake` runs from it alone.

The wheel is unpacked into a temporary folder and imported from there with the checkout's editable
install taken off the import path, so every file it reads must have come from the wheel.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

RUN_FROM_WHEEL = """
import sys
site = sys.argv[1]
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__.lower()]
sys.path[:] = [site] + [p for p in sys.path if "operator" not in p]
import semipd
assert semipd.__file__.startswith(site), semipd.__file__
from semipd.cli import main
sys.exit(main(["simulate", "--trace", "mooncake", "--duration", "60"]))
"""


def test_a_wheel_runs_the_simulator_on_its_own_data(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(ROOT)],
        cwd=tmp_path,
        timeout=300,
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (tmp_path / "dist").glob("semipd_operator-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for data in (
        "semipd/data/traces/mooncake-conversation.jsonl.gz",
        "semipd/data/crds/inference.networking.k8s.io_inferencepools.yaml",
        "semipd/data/pools/sim-mixed-gpu-ascend.yaml",
    ):
        assert data in names, data
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    out = subprocess.run(
        [sys.executable, "-c", RUN_FROM_WHEEL, str(site)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "simulated" in out.stdout
    assert "InferencePool demo" in out.stdout
