"""The probe harness's day criterion takes its bar from the committed day bench (bench/probe_policy.py):
per case, the cheapest replica-only fixed split that met 99 %, never ours or a split that missed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from probe_policy import day_references


def _row(name: str, slo: float, hours: float) -> dict[str, object]:
    """A row as bench_fleet_cost stores it (run summary plus `policy` and `slo`)."""
    return {"name": name, "policy": name, "slo_attainment": slo, "slo": slo, "accelerator_hours": hours}


def test_cheapest_replica_only_split_meeting_the_target(tmp_path: Path) -> None:
    path = tmp_path / "fleet_cost.json"
    path.write_text(
        json.dumps(
            {
                "ttft_2s": [  # the headline case is peak 14
                    _row("ours (semipd)", 0.9999, 5.0),
                    _row("ours (replicas only, 100/50)", 0.995, 8.5),
                    _row("ours (replicas only, 100/40)", 0.989, 6.0),
                    _row("ours (replicas only, 90/40)", 0.991, 7.9),
                ],
                "peak_11_ttft_1.5s": [_row("ours (replicas only, 80/100)", 0.97, 9.0)],
            }
        )
    )
    assert day_references(path) == {"peak 14 ttft 2": 7.9}


def test_the_committed_bench_names_every_sweep_case() -> None:
    refs = day_references(Path(__file__).resolve().parents[2] / "bench" / "results" / "fleet_cost.json")
    assert {k.split(" ttft ")[1] for k in refs} == {"1", "1.5", "2", "3"}
    assert len(refs) == 24
