"""The fair judge's headline tables, oracle and plot take only the headline's draw (bench/
bench_fleet_attainment.py): rows from other mix-shift seeds or other ITL bucket layouts have their own
tables, and mixed in they would put two attainments at one (trace, policy, rate) point."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from bench_fleet_attainment import ITL_LAYOUTS, SEEDS, headline_draw


def test_only_seed_zero_with_sglang_buckets_is_the_headline_draw() -> None:
    assert headline_draw({"seed": 0, "itl_buckets": "sglang"})
    assert headline_draw({})  # rows written before either field existed
    assert not headline_draw({"seed": SEEDS[0], "itl_buckets": "sglang"})
    assert not headline_draw({"seed": 0, "itl_buckets": "vllm"})


def test_every_bucket_layout_has_an_edge_at_the_tight_itl_slo() -> None:
    # 50 ms on a bound: the layouts differ only in how finely they resolve the p99 below it.
    assert all(0.05 in bounds for bounds in ITL_LAYOUTS.values())
    assert list(ITL_LAYOUTS["fine"]) == sorted(set(ITL_LAYOUTS["fine"]))
