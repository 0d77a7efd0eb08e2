"""The soak's status diff names the fields a write changed (bench/bench_soak.py), so a steady-state
write is traced to its cause."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from bench_soak import changed_fields


def test_changed_fields_names_nested_paths_and_list_items() -> None:
    before = {
        "observedGeneration": 3,
        "conditions": [{"type": "Ready", "status": "True"}],
        "summary": {"split": "90:50"},
    }
    after = {
        "observedGeneration": 3,
        "conditions": [{"type": "Ready", "status": "False"}],
        "summary": {"split": "90:50"},
    }
    assert changed_fields(before, after) == {"conditions[].status"}
    assert changed_fields(before, before) == set()
    grown = {**before, "conditions": [*before["conditions"], {"type": "Degraded"}], "decisions": []}
    assert changed_fields(before, grown) == {"conditions", "decisions"}
