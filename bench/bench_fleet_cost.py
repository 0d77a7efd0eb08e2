"""Benchmark: accelerator-hours to serve a full day (time-compressed) at >= 99 % SLO attainment.

The Azure conv trace's requests replayed along a diurnal curve (trough 20 % of peak at the start
and end, peak in the middle) compressed into DAY_S of simulated time, in the fair judge's world
(bench_fleet_common.WORLD) and scored by the product's SLO (TTFT and each 60 s window's token-level
p99 ITL; the papers' mean-TPOT attainment beside it). Every controller is capped at 8 H200 GPUs and
starts from 2 replicas. Compared: ours (split + replicas, from the API's start split and from
Semi-PD's), ours with replicas only (spec.autoscaling.mode=replicas) at fixed splits, the Dynamo SLA
planner on an xPyD fleet, HPA on queue length over fixed 80/100 semi-PD pods, and static
provisioning (the fewest fixed replicas that reach 99 % at a split).
Writes bench/results/fleet_cost.{md,json,png}.

    .venv/bin/python bench/bench_fleet_cost.py [--day-s 7200] [--peak 10]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import bench_fleet_common as common

from semipd.sim.fleet.baselines import static
from semipd.traces import TraceRequest, day_shape, prepare

RESULTS = Path(__file__).resolve().parent / "results"
TRACE = "azure-conv"
TARGET = 0.99
DAY_S = 7200.0
PEAK = 14.0
"""The headline day's peak req/s (its results are stored under `ttft_<s>s`, the sweep's under
`peak_<p>_ttft_<s>s`)."""
STATIC_SPLITS = ((80, 100), (100, 50), (100, 40))


def day(day_s: float, peak: float) -> list[TraceRequest]:
    return day_shape(prepare(TRACE, context_length=common.CONTEXT), day_s, peak_rate=peak, trough=0.2)


def run_policy(name: str, day_s: float, peak: float) -> dict[str, Any]:
    reqs = day(day_s, peak)
    fixed = re.fullmatch(r"static (\d+)x@(\d+)/(\d+)", name)
    task = common.Task(TRACE, name, peak, kind="auto", day_s=day_s)
    if fixed:
        n, x, y = (int(v) for v in fixed.groups())
        setup, ctl = static.static_split(common.base_setup(common.spec(TRACE), False), x, y, n)
        out = common.summarised(task, *common.judged(setup, reqs, ctl, name))
    else:
        out = common.run_task(task, reqs)
    out["policy"] = name
    return out


def static_name(n: int, x: int, y: int) -> str:
    return f"static {n}x@{x}/{y}"


def header(day_s: float, peak: float, n_requests: int) -> list[str]:
    return [
        "# Fleet simulator: accelerator-hours for a day at >= 99 % attainment",
        "",
        f"`bench/bench_fleet_cost.py` (seed 0, code {common.code_version()}): {TRACE} requests on a diurnal curve"
        f" (20 % -> {peak:g} req/s ->",
        f"20 %) compressed into {day_s / 3600:g} h of simulated time ({n_requests:,} requests); up to 8 x H200,",
        "Qwen3-32B TP1, in the fair judge's world (share-curve contention; every policy plans with the prior);"
        " ITL SLO 50 ms. *SLO*: attainment by the product's SLO (TTFT and every 60 s window's token-level"
        " p99 ITL, as fleet_attainment.md); *paper*: TTFT and mean TPOT per request. Autoscalers start from 2",
        "replicas (xPyD: 1 prefill + 1 decode); new pods take start-up time"
        f" ({common.latency_model().restart_cost() + 10:.0f} s) before serving. Static rows: the fewest fixed",
        "replicas (4..8) reaching 99 % at that split (or the best of them). Simulated, with the estimated",
        "latency model (docs/simulator.md).",
        "",
    ]


def render(rows: list[dict[str, Any]], ttft: float, note: str) -> list[str]:
    by = {r["policy"]: r for r in rows}
    lines = [
        f"## TTFT SLO {ttft:g} s ({note})",
        "",
        "| policy | SLO | paper | meets 99 % (SLO) | accelerator-hours | vs ours | peak GPUs | replica changes |"
        " split changes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    ours = by["ours (semipd)"]["accelerator_hours"]
    for r in rows:
        peak_gpus = max((s["accelerators"] for s in r.get("timeline", [])), default=None)
        if peak_gpus is None:
            peak_gpus = sum(p["peak_replicas"] * p["accelerators_per_replica"] for p in r["pools"].values())
        ok = "yes" if r["slo"] >= TARGET else "**no**"
        lines.append(
            f"| {r['policy']} | {r['slo']:.2%} | {r['attainment']:.2%} | {ok} | {r['accelerator_hours']:.2f} | "
            f"{r['accelerator_hours'] / ours:.2f}x | {peak_gpus} | {r['replica_changes']} | {r['split_changes']} |"
        )
    meeting = [r for r in rows if r["slo"] >= TARGET]
    lines.append("")
    if meeting:
        best = min(meeting, key=lambda r: r["accelerator_hours"])
        lines.append(f"Cheapest policy that meets 99 %: **{best['policy']}** ({best['accelerator_hours']:.2f} GPU-h).")
    ref = cheapest_fixed(rows)
    if ref is not None:
        verdict = "meets" if by["ours (semipd)"]["slo"] >= TARGET else "does **not** meet"
        lines.append(
            f"Ours {verdict} 99 % at {by['ours (semipd)']['accelerator_hours'] / ref['accelerator_hours']:.2f}x the"
            f" accelerator-hours of replica-only scaling at the cheapest fixed split that meets it ({ref['policy']})."
        )
    lines.append("")
    return lines


def cheapest_fixed(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The replica-only fixed-split run that meets 99 % with the fewest accelerator-hours (None: none does)."""
    ok = [r for r in rows if r["policy"].startswith("ours (replicas only") and r["slo"] >= TARGET]
    return min(ok, key=lambda r: r["accelerator_hours"], default=None)


def plot(sections: list[tuple[float, list[dict[str, Any]]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(sections), 1, figsize=(10, 4.2 * len(sections)), squeeze=False)
    for (ttft, rows), ax in zip(sections, axes[:, 0], strict=True):
        _plot_one(ax, rows)
        ax.set_title(f"GPUs held over the day, TTFT SLO {ttft:g} s (legend: SLO attainment)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_one(ax: Any, rows: list[dict[str, Any]]) -> None:
    ax2 = ax.twinx()
    shown = False
    for r in rows:
        tl = r.get("timeline")
        if not tl:
            continue
        t = [s["t"] / 60 for s in tl]
        style = {"linewidth": 2.2, "color": "black"} if r["policy"] == "ours (semipd)" else {"linewidth": 1.0}
        ax.step(t, [s["accelerators"] for s in tl], where="post", label=f"{r['policy']} ({r['slo']:.1%} SLO)",
                **style)  # fmt: skip
        if not shown:
            ax2.plot(t, [s["rate"] for s in tl], color="grey", alpha=0.35, linewidth=0.8)
            shown = True
    ax.set_xlabel("time (min)")
    ax.set_ylabel("GPUs held")
    ax2.set_ylabel("arrivals/s (grey)")
    ax.legend(fontsize=6, loc="upper left", ncol=2)


SENSITIVITY_PEAKS = (11.0, 12.0, 13.0, 14.0, 15.0, 16.0)
"""Day peaks (req/s) for ours against replica-only scaling at each fixed split."""
SENSITIVITY_TTFTS = (1.5, 2.0, 3.0)
"""TTFT SLOs (s) beside the attainment benchmark's rule for the sweep."""


def peak_sensitivity(day_s: float, peak: float, dump: dict[str, Any]) -> list[str]:
    """Ours vs the cheapest replica-only fixed split that meets 99 %, over a sweep of day peaks and TTFT
    SLOs: one seeded day's verdict turns on a single broken ITL window or burst, so the sweep's count
    and means are the verdict, not one case."""
    names = ["ours (semipd)", *(f"ours (replicas only, {x}/{y})" for x, y in common.DAY_FIXED_SPLITS)]
    lines = [
        "## Day sweep: ours vs replica-only scaling at the cheapest fixed split meeting 99 %",
        "",
        "| peak req/s | TTFT SLO | ours: SLO / GPU-h | cheapest fixed split meeting 99 %: SLO / GPU-h |"
        " ours meets 99 % | GPU-h vs it |",
        "|---|---|---|---|---|---|",
    ]
    common.TTFT_OVERRIDE.pop(TRACE, None)
    rule = common.ttft_slo(TRACE)
    verdicts: dict[float, list[tuple[float, bool, float | None]]] = {}
    for ttft in (rule, *SENSITIVITY_TTFTS):
        for pk in SENSITIVITY_PEAKS:
            common.TTFT_OVERRIDE[TRACE] = ttft
            key = f"ttft_{ttft:g}s"
            done = pk == peak and key in dump
            rows = dump[key] if done else common.run_all(names, partial(run_policy, day_s=day_s, peak=pk))
            ours = next(r for r in rows if r["policy"] == "ours (semipd)")
            ref = cheapest_fixed(rows)
            ref_text = (
                f"{ref['policy'].removeprefix('ours (replicas only, ').rstrip(')')}: {ref['slo']:.2%} /"
                f" {ref['accelerator_hours']:.2f}"
                if ref
                else "none"
            )
            ratio = ours["accelerator_hours"] / ref["accelerator_hours"] if ref else None
            met = ours["slo"] >= TARGET
            verdicts.setdefault(ttft, []).append((ours["slo"], met and (ratio is None or ratio <= 1.0), ratio))
            lines.append(
                f"| {pk:g} | {ttft:g} s | {ours['slo']:.2%} / {ours['accelerator_hours']:.2f} | {ref_text} |"
                f" {'yes' if met else '**no**'} | {f'{ratio:.2f}x' if ratio is not None else '-'} |"
            )
            if not done:
                dump[f"peak_{pk:g}_{key}"] = [{k: v for k, v in r.items() if k != "timeline"} for r in rows]
    lines += ["", "| TTFT SLO | cases | ours meets 99 % at <= the GPU-h of the cheapest fixed split | mean SLO |"
              " median GPU-h vs it |", "|---|---|---|---|---|"]  # fmt: skip
    for ttft, vs in verdicts.items():
        ratios = sorted(r for _, _, r in vs if r is not None)
        median = f"{ratios[len(ratios) // 2]:.2f}x" if ratios else "-"
        lines.append(f"| {ttft:g} s | {len(vs)} | {sum(ok for _, ok, _ in vs)} | "
                     f"{sum(a for a, _, _ in vs) / len(vs):.2%} | {median} |")  # fmt: skip
    total = [ok for vs in verdicts.values() for _, ok, _ in vs]
    lines += ["", f"Over the sweep ours meets the criterion in **{sum(total)} of {len(total)}** cases.", ""]
    return lines


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--day-s", type=float, default=DAY_S)
    ap.add_argument("--peak", type=float, default=PEAK)
    ap.add_argument("--out", default=str(RESULTS / "fleet_cost"))
    args = ap.parse_args()
    names = list(common.autoscaled_policies(TRACE))
    names += [static_name(n, x, y) for x, y in STATIC_SPLITS for n in range(4, common.BUDGET + 1)]
    started = time.perf_counter()
    lines = header(args.day_s, args.peak, len(day(args.day_s, args.peak)))
    sections = []
    dump: dict[str, Any] = {}
    for ttft, note in ((common.ttft_slo(TRACE), "the attainment benchmark's rule"), (2.0, "looser")):
        common.TTFT_OVERRIDE[TRACE] = ttft
        rows = common.run_all(names, partial(run_policy, day_s=args.day_s, peak=args.peak))
        # Static provisioning: per split, the fewest replicas that meet the target (or the best of them).
        keep = []
        for x, y in STATIC_SPLITS:
            cands = [r for r in rows if r["policy"].endswith(f"@{x}/{y}")]
            ok = [r for r in cands if r["slo"] >= TARGET]
            best = min(ok, key=lambda r: r["accelerator_hours"]) if ok else max(cands, key=lambda r: r["slo"])
            keep.append(best)
        rows = [r for r in rows if not r["policy"].startswith("static ")] + keep
        lines += render(rows, ttft, note)
        sections.append((ttft, rows))
        dump[f"ttft_{ttft:g}s"] = rows
    lines += peak_sensitivity(args.day_s, args.peak, dump)
    wall = time.perf_counter() - started
    lines += [f"Wall time {wall:.0f} s ({common.WORKERS} worker processes).", ""]
    text = "\n".join(lines)
    out = Path(args.out)
    out.with_suffix(".md").write_text(text, encoding="utf-8")
    out.with_suffix(".json").write_text(json.dumps(dump, indent=1))
    plot(sections, out.with_suffix(".png"))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
