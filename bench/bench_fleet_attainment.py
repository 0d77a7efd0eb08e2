"""Benchmark: SLO attainment vs request rate per policy on the Azure conv, Azure code and Mooncake
traces, on the same 8 H200 GPUs; the highest rate at >= 90 % attainment per policy and ours / each.

Static baselines are searched: the best static semi-PD split over bench_fleet_common.STATIC_SPLITS
and the best xPyD ratio over every x + y = 8, each chosen per trace by its highest rate at >= 90 %.
Writes bench/results/fleet_attainment.{md,json,png}. Seeded and deterministic.

    .venv/bin/python bench/bench_fleet_attainment.py [--traces azure-conv,...] [--quick]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import bench_fleet_common as common

RESULTS = Path(__file__).resolve().parent / "results"
RATES = {
    "azure-conv": (6.0, 10.0, 14.0, 18.0, 22.0, 26.0),
    "azure-code": (0.5, 1.0, 1.5, 2.0, 3.0, 4.0),
    "mooncake": (0.5, 1.0, 1.5, 2.0, 2.5, 3.0),
}
TARGET = 0.9
PAPER = {"vllm-chunked": 1.55, "vllm-prefill-first": 1.72, "disagg (best ratio)": 1.62, "static-100-100": 1.11}
"""Semi-PD paper, Fig. 15: its dynamic partitioning's rate at > 90 % attainment over each baseline."""
HEADLINE = ("semipd-paper", "semipd-code", "static-100-100", "static (best split)", "vllm-chunked",
            "vllm-prefill-first", "disagg (best ratio)")  # fmt: skip


def curves(rows: list[dict[str, Any]], trace: str) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        if r["trace"] == trace:
            out.setdefault(r["policy"], []).append((r["rate"], r["attainment"]))
    return {k: sorted(v) for k, v in out.items()}


def best_of(cv: dict[str, list[tuple[float, float]]], prefix: str) -> tuple[str, float, bool]:
    cands = [(common.max_rate_at(v, TARGET), k) for k, v in cv.items() if k.startswith(prefix)]
    (rate, capped), name = max(cands, key=lambda c: (c[0][0], -len(c[1])))
    return name, rate, capped


def fmt_rate(rate: float, capped: bool) -> str:
    return f">= {rate:.2f}" if capped else f"{rate:.2f}"


def render(rows: list[dict[str, Any]], traces: list[str], wall: float) -> tuple[str, dict[str, Any]]:
    lines = [
        "# Fleet simulator: SLO attainment vs request rate",
        "",
        f"`bench/bench_fleet_attainment.py` (seed 0, code {common.code_version()}). Same hardware for every policy:",
        "**8 x NVIDIA H200**,",
        f"Qwen3-32B BF16 TP1 per instance, KV pool {common.latency_model().kv_capacity_tokens():,} tokens per GPU.",
        "Attainment = requests with TTFT <= TTFT SLO and mean inter-token time <= ITL SLO, over all arrivals.",
        "SLOs by one rule: TTFT = 7.5 x a lone mean prompt's TTFT on a whole GPU; ITL = 50 ms.",
        "Rates are fleet-wide requests/s (divide by 8 for per-GPU). Mooncake runs use its first 2,500",
        "requests with prefix caching and prefix-aware routing; prompts are cut to fit the 32k context.",
        "Every number here is a simulation with an estimated latency model (docs/simulator.md), not a",
        "measurement on GPUs.",
        "",
    ]
    summary: dict[str, Any] = {}
    for trace in traces:
        cv = curves(rows, trace)
        split_name, split_rate, split_cap = best_of(cv, "static-")
        dis_name, dis_rate, dis_cap = best_of(cv, "disagg-")
        table: dict[str, tuple[float, bool, str]] = {}
        for name, pts in cv.items():
            if name.startswith(("static-", "disagg-")) and name not in ("static-100-100", "static-80-100"):
                continue
            rate, cap = common.max_rate_at(pts, TARGET)
            table[name] = (rate, cap, name)
        table["static (best split)"] = (split_rate, split_cap, split_name)
        table["disagg (best ratio)"] = (dis_rate, dis_cap, dis_name)
        ours = table["ours"][0]
        slo_t = next(r["slo"]["ttft_s"] for r in rows if r["trace"] == trace)
        lines += [f"## {trace} (TTFT SLO {slo_t:g} s, ITL SLO 50 ms)", ""]
        rates = RATES[trace]
        shown = ["ours", *[k for k in table if k != "ours"]]
        lines.append("| policy | " + " | ".join(f"{r:g}/s" for r in rates) + " | max rate @ >= 90 % | ours / it |")
        lines.append("|---|" + "---|" * (len(rates) + 2))
        trace_sum: dict[str, Any] = {}
        for name in shown:
            rate, cap, src = table[name]
            pts = dict(cv[src])
            cells = " | ".join(f"{pts[r]:.1%}" if r in pts else "-" for r in rates)
            ratio = "-" if name == "ours" else (f"{ours / rate:.2f}x" if rate > 0 else "inf")
            label = name if src == name else f"{name}: {src}"
            lines.append(f"| {label} | {cells} | {fmt_rate(rate, cap)} | {ratio} |")
            trace_sum[name] = {"source": src, "max_rate": rate, "lower_bound": cap,
                               "ratio_ours": (ours / rate) if rate > 0 else None}  # fmt: skip
        lines.append("")
        searched = sorted((k for k in cv if k.startswith(("static-", "disagg-"))),
                          key=lambda k: -common.max_rate_at(cv[k], TARGET)[0])  # fmt: skip
        lines.append("Searched static layouts, best first: " + ", ".join(
            f"{k} {fmt_rate(*common.max_rate_at(cv[k], TARGET))}" for k in searched) + ".")  # fmt: skip
        lines.append("")
        summary[trace] = trace_sum
    lines += ["## Ours vs each baseline (highest rate at >= 90 % attainment)", ""]
    lines.append("| baseline | " + " | ".join(traces) + " | Semi-PD paper (its dynamic vs this) |")
    lines.append("|---|" + "---|" * (len(traces) + 1))
    for name in HEADLINE:
        cells = []
        for trace in traces:
            ent = summary[trace].get(name)
            cells.append("-" if ent is None or ent["ratio_ours"] is None else f"{ent['ratio_ours']:.2f}x")
        paper = PAPER.get(name)
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {f'{paper:.2f}x' if paper else '-'} |")
    lines += ["", f"Wall time {wall:.0f} s for {len(rows)} runs ({common.WORKERS} worker processes).", ""]
    return "\n".join(lines), summary


def plot(rows: list[dict[str, Any]], traces: list[str], summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(traces), figsize=(5.2 * len(traces), 4.2), squeeze=False)
    for ax, trace in zip(axes[0], traces, strict=True):
        cv = curves(rows, trace)
        show = {k: v["source"] for k, v in summary[trace].items()}
        for label, src in show.items():
            pts = cv[src]
            style = {"linewidth": 2.5, "color": "black"} if label == "ours" else {"linewidth": 1.2}
            name = label if src == label else f"{label} ({src})"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, label=name, **style)
        ax.axhline(TARGET, color="grey", linestyle="--", linewidth=0.8)
        ax.set_title(trace)
        ax.set_xlabel("request rate (req/s, 8 x H200)")
        ax.set_ylabel("SLO attainment")
        ax.set_ylim(0, 1.02)
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", default=",".join(common.TRACES))
    ap.add_argument("--quick", action="store_true", help="3 rates, 3 static layouts instead of the searches")
    ap.add_argument("--out", default=str(RESULTS / "fleet_attainment"))
    args = ap.parse_args()
    traces = args.traces.split(",")
    policies = list(common.all_fixed_budget())
    if args.quick:
        keep = ("static-100-100", "static-100-50", "disagg-5p3d")
        policies = [p for p in policies if p in common.fixed_budget_policies() or p in keep]
    tasks = []
    for trace in traces:
        rates = RATES[trace][1::2] if args.quick else RATES[trace]
        tasks += [common.Task(trace, p, r) for p in policies for r in rates]
    # Longest first keeps both workers busy to the end.
    tasks.sort(key=lambda t: (not t.policy.startswith(("ours", "semipd-")), t.rate))
    started = time.perf_counter()
    rows = common.run_all(tasks, common.run_task)
    wall = time.perf_counter() - started
    text, summary = render(rows, traces, wall)
    out = Path(args.out)
    out.with_suffix(".md").write_text(text, encoding="utf-8")
    out.with_suffix(".json").write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))
    plot(rows, traces, summary, out.with_suffix(".png"))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
