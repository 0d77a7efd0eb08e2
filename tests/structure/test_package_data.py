"""The package carries its own data: traces and the upstream GIE CRD come from semipd/data, never from the
workspace folder beside the checkout."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import yaml

from semipd.data import default_pool, upstream_gie_crd
from semipd.traces import KNOWN_TRACES, default_trace_dir, load_trace

ROOT = Path(__file__).resolve().parents[2]
WORKSPACE_DIR = "".join(("sha", "red"))  # the folder beside the checkout that users do not have


def test_every_known_trace_ships_and_parses() -> None:
    for name, file in KNOWN_TRACES.items():
        assert (default_trace_dir() / file).is_file(), file
        requests = load_trace(name)
        assert len(requests) > 8000, name
        assert requests[0].arrival_s == 0.0


def test_the_shipped_traces_keep_their_attribution() -> None:
    readme = (default_trace_dir() / "README.md").read_text()
    assert "Patel et al." in readme
    assert "ISCA 2024" in readme
    assert "CC-BY-4.0" in readme
    assert "Apache-2.0" in readme


def test_the_upstream_gie_crd_ships() -> None:
    crd = yaml.safe_load(upstream_gie_crd().read_text())
    assert crd["metadata"]["name"] == "inferencepools.inference.networking.k8s.io"


def test_gzip_traces_are_deterministic_copies() -> None:
    # gzip -n: no name or timestamp in the header, so re-copying the source gives the same bytes.
    for file in KNOWN_TRACES.values():
        with (default_trace_dir() / file).open("rb") as f:
            header = f.read(10)
        assert header[:2] == b"\x1f\x8b", file
        assert header[4:8] == b"\0\0\0\0", file
        with gzip.open(default_trace_dir() / file) as g:  # type: ignore[arg-type]
            assert g.read(64)


def test_nothing_reads_the_workspace_shared_folder() -> None:
    # A read of the workspace data folder: its data path, or a path joined with its name.
    name = WORKSPACE_DIR
    pattern = re.compile(rf"""{name}/data|/\s*["']{name}["']|["']{name}["']\s*/""")
    offenders = []
    for top in ("operator", "tests", "e2e", "bench", "scripts"):
        for path in (ROOT / top).rglob("*"):
            if path.suffix not in {".py", ".sh"} or path == Path(__file__):
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if pattern.search(line):
                    offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    makefile = (ROOT / "Makefile").read_text()
    assert f"../{WORKSPACE_DIR}" not in makefile
    assert not offenders, "\n".join(offenders)


def test_the_default_pool_is_the_example() -> None:
    assert default_pool().read_text() == (ROOT / "examples" / "sim-mixed-gpu-ascend.yaml").read_text()
