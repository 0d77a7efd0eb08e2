"""Every example names the InferencePool's group or short name (the GIE kind shares the plural)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_shows_sipool_and_the_full_resource_name(path: Path) -> None:
    text = path.read_text()
    name = yaml.safe_load(text)["metadata"]["name"]
    assert f"kubectl get sipool {name}" in text
    assert f"kubectl get inferencepools.semipd.io {name}" in text
