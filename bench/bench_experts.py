"""Benchmark: MoE expert placement, DeepSeek EPLB vs the improved placement.

Max/mean device load on the reference's test vectors and on synthetic Zipf loads (61 layers x 256
experts, top-8, skew 0.6..1.4, the simulated engine's routing model), and compute time at 256
experts x 61 layers x 64 devices (320 slots). Medians and side-by-side ratios.

    .venv/bin/python bench/bench_experts.py [--loads 100] [--repeats 9]

Writes bench/results/experts.md, experts.json and experts.png.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from semipd.policy.experts.eplb import rebalance_experts
from semipd.policy.experts.improved import has_duplicates, rebalance_experts_improved
from semipd.policy.experts.layout import Placement
from semipd.policy.experts.metrics import device_loads
from semipd.policy.experts.synthetic import zipf_suite

# The reference vectors live with the unit tests that pin them; run as a script, the repo root is not on the path.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.policy.experts import vectors

RESULTS = Path(__file__).parent / "results"
LAYERS, EXPERTS, TOP_K, DEVICES, SLOTS = 61, 256, 8, 64, 320
CONFIGS = {
    "global, EP64": (SLOTS, 1, 1, DEVICES),
    "hierarchical, 4 nodes x 16": (SLOTS, 8, 4, DEVICES),
    "hierarchical, 8 nodes x 8": (SLOTS, 8, 8, DEVICES),
}
Algorithm = Callable[[np.ndarray, int, int, int, int], Placement]


@dataclass
class LoadResult:
    skew: float
    eplb: np.ndarray  # per-layer max/mean
    improved: np.ndarray
    eplb_stacks: np.ndarray  # per layer: EPLB's map puts two copies of an expert on one device


def par(weight: np.ndarray, placement: Placement, devices: int) -> np.ndarray:
    loads = device_loads(weight, placement.phy2log, devices)
    return loads.max(axis=1) / loads.mean(axis=1)


def vector_rows() -> list[str]:
    rows = []
    for name, (weight, topology) in vectors.ALL.items():
        w = np.array(weight, dtype=float)
        e = par(w, rebalance_experts(w, *topology), topology[3])
        i = par(w, rebalance_experts_improved(w, *topology), topology[3])
        for layer in range(w.shape[0]):
            rows.append(f"| {name} | {layer} | {e[layer]:.3f} | {i[layer]:.3f} | {i[layer] / e[layer]:.3f} |")
    flash_mean = float(np.sum(vectors.FLASHLB_WEIGHT)) / 8
    rows.append(f"| flashlb (FlashLB's reported max {vectors.FLASHLB_REPORTED_MAX}) | 0 | - | "
                f"{vectors.FLASHLB_REPORTED_MAX / flash_mean:.3f} | - |")  # fmt: skip
    return rows


def run_suite(suite: list[tuple[float, np.ndarray]], topology: tuple[int, int, int, int]) -> list[LoadResult]:
    out = []
    for skew, w in suite:
        theirs = rebalance_experts(w, *topology)
        ours = rebalance_experts_improved(w, *topology)
        out.append(
            LoadResult(
                skew, par(w, theirs, topology[3]), par(w, ours, topology[3]), has_duplicates(theirs.phy2log, DEVICES)
            )
        )
    return out


def median_ms(fn: Callable[[np.ndarray], object], inputs: list[np.ndarray]) -> tuple[float, float]:
    """(median wall ms, median CPU ms) of fn over the inputs, one call each."""
    wall, cpu = [], []
    for x in inputs:
        w0, c0 = time.perf_counter(), time.process_time()
        fn(x)
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall) * 1e3, statistics.median(cpu) * 1e3


def summary_rows(name: str, results: list[LoadResult]) -> tuple[list[str], dict[str, float]]:
    mean_e = np.array([r.eplb.mean() for r in results])
    mean_i = np.array([r.improved.mean() for r in results])
    worst_e = np.array([r.eplb.max() for r in results])
    worst_i = np.array([r.improved.max() for r in results])
    layer_e = np.concatenate([r.eplb for r in results])
    layer_i = np.concatenate([r.improved for r in results])
    stacks = np.concatenate([r.eplb_stacks for r in results])
    worse = layer_i > layer_e * (1 + 1e-9)
    better = layer_i < layer_e * (1 - 1e-9)
    stats = {
        "median_mean_par_eplb": float(np.median(mean_e)),
        "median_mean_par_improved": float(np.median(mean_i)),
        "median_ratio_mean_par": float(np.median(mean_i / mean_e)),
        "median_worst_par_eplb": float(np.median(worst_e)),
        "median_worst_par_improved": float(np.median(worst_i)),
        "median_ratio_worst_par": float(np.median(worst_i / worst_e)),
        "loads_mean_par_not_worse": int((mean_i <= mean_e * (1 + 1e-9)).sum()),
        "loads_worst_par_not_worse": int((worst_i <= worst_e * (1 + 1e-9)).sum()),
        "layers": int(layer_e.size),
        "layers_better": int(better.sum()),
        "layers_worse": int(worse.sum()),
        "layers_worse_where_eplb_stacks_copies": int((worse & stacks).sum()),
        "layers_where_eplb_stacks_copies": int(stacks.sum()),
    }
    n = len(results)
    rows = [
        f"| {name} | mean over layers | {stats['median_mean_par_eplb']:.4f} | {stats['median_mean_par_improved']:.4f} "
        f"| {stats['median_ratio_mean_par']:.4f} | {stats['loads_mean_par_not_worse']}/{n} |",
        f"| {name} | worst layer | {stats['median_worst_par_eplb']:.4f} | {stats['median_worst_par_improved']:.4f} "
        f"| {stats['median_ratio_worst_par']:.4f} | {stats['loads_worst_par_not_worse']}/{n} |",
    ]
    return rows, stats


def plot(all_results: dict[str, list[LoadResult]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, results in all_results.items():
        e = np.array([r.eplb.mean() for r in results])
        i = np.array([r.improved.mean() for r in results])
        left.scatter(e, i, s=12, label=name)
        right.plot(sorted(np.concatenate([r.improved / r.eplb for r in results])), label=name)
    lo = min(left.get_xlim()[0], left.get_ylim()[0])
    hi = max(left.get_xlim()[1], left.get_ylim()[1])
    left.plot([lo, hi], [lo, hi], color="grey", linewidth=0.8, linestyle="--")
    left.set(xlabel="EPLB max/mean (mean over layers)", ylabel="improved max/mean", title="per Zipf load")
    right.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    right.set(xlabel="layers, sorted", ylabel="improved / EPLB max/mean", title="per layer (all loads)")
    left.legend(fontsize=8)
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--loads", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    RESULTS.mkdir(exist_ok=True)
    suite = zipf_suite(args.loads, LAYERS, EXPERTS, TOP_K, seed=0)

    results: dict[str, list[LoadResult]] = {}
    table: list[str] = []
    stats: dict[str, dict[str, float]] = {}
    for name, topology in CONFIGS.items():
        results[name] = run_suite(suite, topology)
        rows, stats[name] = summary_rows(name, results[name])
        table.extend(rows)

    timing = []
    timing_stats: dict[str, dict[str, float]] = {}
    inputs = [suite[i % len(suite)][1] for i in range(args.repeats)]
    for name, topology in CONFIGS.items():
        ours = median_ms(lambda w, t=topology: rebalance_experts_improved(w, *t), inputs)
        theirs = median_ms(lambda w, t=topology: rebalance_experts(w, *t), inputs)
        timing_stats[name] = {
            "improved_wall_ms": ours[0],
            "improved_cpu_ms": ours[1],
            "eplb_wall_ms": theirs[0],
            "eplb_cpu_ms": theirs[1],
        }
        cells = [f"{x:.1f}" for x in (*ours, *theirs, ours[1] / theirs[1])]
        timing.append(f"| {name} | " + " | ".join(cells) + " |")

    plot(results, RESULTS / "experts.png")
    layer_keys = ["layers", "layers_better", "layers_worse", "layers_worse_where_eplb_stacks_copies"]
    layer_lines = []
    for name, st in stats.items():
        total, better, worse, stacked = (int(st[k]) for k in layer_keys)
        cells = [total, better, total - better - worse, worse, stacked, int(st["layers_where_eplb_stacks_copies"])]
        layer_lines.append(f"| {name} | " + " | ".join(str(c) for c in cells) + " |")
    lines = [
        "# MoE expert placement: EPLB vs improved",
        "",
        "`bench/bench_experts.py`. Max/mean = busiest device's tokens over the mean device's, per MoE layer "
        "(tokens of an expert split evenly over its replicas). Improved = `rebalance_experts_improved` "
        "(anti-affine: never two copies of an expert on one device); EPLB = the DeepSeek port.",
        "",
        "## Reference test vectors",
        "",
        "| vector | layer | EPLB max/mean | improved max/mean | improved / EPLB |",
        "|---|---|---|---|---|",
        *vector_rows(),
        "",
        f"## {args.loads} synthetic Zipf loads",
        "",
        f"{LAYERS} layers x {EXPERTS} experts, top-{TOP_K}, {SLOTS} slots on {DEVICES} devices; skew uniform in "
        "[0.6, 1.4], 2k-50k tokens per load (`semipd.policy.experts.synthetic`, the simulated engine's routing "
        "model). Medians over loads; the ratio column is the median of per-load ratios.",
        "",
        "| policy | per load | EPLB | improved | improved / EPLB | loads with improved <= EPLB |",
        "|---|---|---|---|---|---|",
        *table,
        "",
        "Per layer (all loads): where improved is worse, EPLB's map stacks two copies of one expert on one "
        "device, which anti-affinity forbids (improved keeps EPLB's own slots for a node wherever those are "
        "anti-affine and lighter, so it can lose only there).",
        "",
        "| policy | layers | improved better | equal | improved worse | of those, EPLB stacks copies "
        "| EPLB stacks copies (all layers) |",
        "|---|---|---|---|---|---|---|",
        *layer_lines,
        "",
        "![EPLB vs improved](experts.png)",
        "",
        f"## Compute time, {EXPERTS} experts x {LAYERS} layers x {DEVICES} devices",
        "",
        f"Median of {args.repeats} calls over different loads of the suite; one core of a shared 2-core machine "
        "(other jobs running), so CPU time is the steadier number.",
        "",
        "| policy | improved wall ms | improved CPU ms | EPLB wall ms | EPLB CPU ms | improved / EPLB (CPU) |",
        "|---|---|---|---|---|---|",
        *timing,
    ]
    (RESULTS / "experts.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (RESULTS / "experts.json").write_text(json.dumps({"suite": stats, "timing": timing_stats}, indent=2) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
