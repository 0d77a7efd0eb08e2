"""Benchmark: latency-model call cost (the fleet simulator calls it millions of times).

Median of --repeats timings of 100k calls each, per method and model class. Writes
bench/results/latency_model.md.

    .venv/bin/python bench/latency_model.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import timeit
from collections.abc import Callable
from pathlib import Path

from semipd.perf import LatencyModel

CALLS = 100_000


def per_call_us(fn: Callable[[], object], repeats: int) -> float:
    return statistics.median(timeit.repeat(fn, number=CALLS, repeat=repeats)) / CALLS * 1e6


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "latency_model.md"))
    args = ap.parse_args()
    dense = LatencyModel.from_names("h100", "llama-3-8b")
    moe = LatencyModel.from_names("h200", "deepseek-v3", 8)
    batch8 = [512] * 8
    prefixes = [256] * 8
    cases: list[tuple[str, Callable[[], object]]] = [
        ("decode_step_time, dense", lambda: dense.decode_step_time(64, 64 * 1500, 0.7)),
        ("decode_step_time, MoE", lambda: moe.decode_step_time(64, 64 * 1500, 0.7)),
        ("prefill_time, dense, 8 prompts", lambda: dense.prefill_time(batch8, 0.6)),
        ("prefill_time, MoE, 8 prompts", lambda: moe.prefill_time(batch8, 0.6)),
        ("prefill_time, dense, 8 prompts + prefixes", lambda: dense.prefill_time(batch8, 0.6, prefixes)),
        ("kv_capacity_tokens", dense.kv_capacity_tokens),
    ]
    rows = [(name, per_call_us(fn, args.repeats)) for name, fn in cases]
    lines = [
        "# Latency model call cost",
        "",
        f"`bench/latency_model.py`: median of {args.repeats} x {CALLS:,} calls, one core (shared machine).",
        "",
        "| call | µs per call | calls per second |",
        "|---|---|---|",
        *(f"| {name} | {us:.2f} | {1e6 / us:,.0f} |" for name, us in rows),
    ]
    Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
