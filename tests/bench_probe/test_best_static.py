"""The probe harness's `sets --static` column: the best static split beside ours, never ours itself."""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from probe_policy import best_static


def test_the_best_static_split_is_the_highest_scoring_static_one() -> None:
    scores = {"ours": 0.99, "static-100-50": 0.92, "static-100-40": 0.95, "static-90-40": 0.95}
    assert best_static(scores) == ("static-100-40", 0.95)


def test_no_static_split_ran() -> None:
    name, slo = best_static({"ours": 0.9})
    assert name == ""
    assert math.isnan(slo)
