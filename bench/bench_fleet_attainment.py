"""Benchmark: a fair judge. SLO attainment vs request rate per policy on 8 H200 GPUs, scored by the
product's SLO (TTFT + token-level p99 ITL per 60 s window) and by the paper's (mean TPOT per
request), at two SLO scales, on four traces, with the per-window oracle, a sensitivity table over the
contention interference and a perturbed truth, and accelerator-hours on the mix-shift day.

The simulated world runs the share-curve contention model (semipd.perf.contention, defaults
k_p 0.6, k_d 0.2, eps 0.2); every policy's prior is the shipped latency model (take-turns). Writes
bench/results/fleet_attainment.{md,json,png}. Seeded and deterministic.

    .venv/bin/python bench/bench_fleet_attainment.py [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import bench_fleet_common as common

from semipd.engines.sglang import ITL_BUCKETS as SGLANG_ITL_BUCKETS
from semipd.engines.vllm import ITL_BUCKETS as VLLM_ITL_BUCKETS
from semipd.perf import ContentionModel
from semipd.sim.fleet.baselines import disaggregated, static
from semipd.sim.fleet.baselines.dynamo_planner import DynamoPlannerController, DynamoProfile
from semipd.sim.fleet.baselines.hpa_queue import HPAQueueController
from semipd.sim.fleet.baselines.semipd_code import SemiPDCodeController
from semipd.sim.fleet.baselines.semipd_paper import SemiPDPaperController
from semipd.sim.fleet.controller import Controller
from semipd.sim.fleet.policy import PolicyController
from semipd.sim.fleet.setup import FleetSetup
from semipd.sim.fleet.truth import Truth
from semipd.traces import day_shape

RESULTS = Path(__file__).resolve().parent / "results"
TRACES = ("azure-conv", "azure-code", "mooncake", "mix-shift")
RATES = {
    "azure-conv": (16.0, 20.0, 24.0, 28.0),
    "azure-code": (2.0, 3.0, 4.0),
    "mooncake": (2.0, 3.0, 4.0),
    "mix-shift": (4.0, 5.0, 6.0, 7.0),
}
"""A top rate past every policy's 90 % point, so max rates are interpolated, not '>=' the grid (conv,
the sensitivity trace, and mix-shift get four)."""
DURATION_S = 420.0
"""Arrivals kept per run of the real traces (mix-shift is its own 600 s day): seven 60 s SLO windows at
every rate, so a controller with a 60 s window has time to act. (A request cap, as before, made conv at
42/s a 60 s run, which scored nothing but each controller's start split.)"""
TARGET = 0.9
STATIC_SPLITS = ((100, 100), (100, 70), (100, 50), (100, 40), (90, 40))
DISAGG = ((4, 4), (5, 3), (6, 2))
SLO_AWARE = ("ours", "ours-start-80-100", "ours-restart", "semipd-paper", "semipd-code", "dynamo-planner", "hpa-queue")
GRID_SLO_AWARE = ("ours", "ours-start-80-100", "ours-restart", "semipd-paper", "semipd-code")
SEMIPD_START = (80, 100)
"""Semi-PD's published start split: its two controllers start there, and so does `ours-start-80-100`
(ours from the same start, to show what the product's default start (100, 50) is worth)."""
"""Run on the rate grid at both scales; the replica scalers (Dynamo-style, HPA) run on the day trace."""
FIXED = (
    "vllm-chunked",
    "vllm-prefill-first",
    *(f"static-{x}-{y}" for x, y in STATIC_SPLITS),
    *(f"disagg-{p}p{d}d" for p, d in DISAGG),
)
WORLD = common.WORLD
INTERFERENCE = (0.0, 0.2, 0.5)
MISMATCH = ((1.3, 0.7), (0.7, 1.3))
SENS_TRACE = "azure-conv"
MISMATCH_TRACES = ("azure-conv", "mix-shift")
"""The perturbed truth (prefill, decode time x 1.3 / 0.7) runs on conv and on the mix-shift trace, the one
whose request mix moves under the controller (issue: ours >= the best static split on both)."""
ITL_LAYOUTS = {
    "sglang": SGLANG_ITL_BUCKETS,
    "vllm": VLLM_ITL_BUCKETS,
    "fine": tuple(
        sorted({*SGLANG_ITL_BUCKETS, *(k / 1000 for k in range(40, 61, 2)), *(k / 1000 for k in range(100, 151, 10))})
    ),
}
"""ITL bucket edges an engine may export: SGLang's (every run but the layout rows: 40, 50, 75 ms), vLLM's
and MindIE's (25, 50, 75 ms) and SGLang's with 2 ms edges from 40 to 60 ms and 10 ms from 100 to 150 ms
(vLLM's --custom-histogram-buckets could export such). The p99 a controller reads is interpolated inside
a bucket; statics do not read it."""
LAYOUT_TRACES = ("azure-conv", "mix-shift")
SEEDS = (1, 2, 3, 4)
"""Other draws of the mix-shift trace (its synthesis is seeded; the real traces are not, and the router's
ties hardly move them): the headline's mix-shift numbers are one draw (seed 0)."""
SEED_RATES = (5.0, 6.0)
SEED_STATICS = ("static-100-50", "static-90-40", "static-100-40")
PERT_SEED_TRUTH = (0.7, 1.3)
"""The perturbed world whose one draw swings most: mix-shift with decode 30 % slower than the model, where
a window ours or a static split breaks costs 10 points (a controller change moved 5 req/s by -10.5 points
in seed 0 and +20.1 in seed 2). Its verdict is also taken on medians over the seeds (pert_seed_table)."""
DAY_PEAK = 6.0
DAY_S = 1200.0


def single_tpot() -> float:
    """A lone request's decode step on a whole GPU at the conv trace's mean context (~1.3k tokens)."""
    return common.latency_model().decode_step_time(1, 1300, 1.0)


def itl_slo(scale: str) -> float:
    return common.ITL_SLO_S if scale == "tight" else common.round2(7.5 * single_tpot())


@dataclass(frozen=True)
class Run:
    trace: str
    policy: str
    rate: float
    scale: str = "both"
    """tight | paper for SLO-aware controllers (they are told the SLO); both: scored at each."""
    eps: float = WORLD.interference
    truth: tuple[float, float] = (1.0, 1.0)
    day: bool = False
    seed: int = common.SEED
    """Of the mix-shift trace's synthesis and of the router's ties (SEEDS)."""
    itl_buckets: str = "sglang"
    """The engine's ITL histogram bucket layout the controller reads (ITL_LAYOUTS)."""
    prior: str = "take-turns"
    """The contention form ours' latency models assume (ContentionModel.parse): the shipped take turns,
    or "k_p,k_d,eps" (probes only; every committed table uses the shipped prior)."""


def build(run: Run, prefix: bool) -> tuple[FleetSetup, Controller]:
    tr = run.trace
    itl = itl_slo("tight" if run.scale == "both" else run.scale)
    itl_s = f"{round(itl * 1000)}ms"
    ttft = common.ttft_slo(tr)
    name = run.policy
    lo = 1 if name in ("dynamo-planner", "hpa-queue") or run.day else common.BUDGET
    start = SEMIPD_START if name.startswith("semipd-") or name == "ours-start-80-100" else (None, None)
    engine = "sim-semipd" if name == "ours-restart" else "sim"  # restart mode: Semi-PD main's switches
    s = common.spec(tr, itl=itl_s, lo=lo, hi=common.BUDGET, prefill=start[0], decode=start[1], engine=engine)
    base = common.base_setup(s, prefix, replicas=2 if lo == 1 else None, seed=run.seed)
    if run.itl_buckets != "sglang":
        bounds = ITL_LAYOUTS[run.itl_buckets]
        pools = tuple(replace(p, metrics=replace(p.metrics, itl_buckets=bounds)) for p in base.pools)
        base = replace(base, pools=pools)
    if name in ("ours", "ours-start-80-100", "ours-restart"):
        layouts = {p.name: p.metrics.itl_buckets for p in base.pools}
        return base, PolicyController(s, name, itl_buckets=layouts, prior=ContentionModel.parse(run.prior))
    if name == "semipd-paper":
        return base, SemiPDPaperController(ttft, itl)
    if name == "semipd-code":
        return base, SemiPDCodeController(ttft, itl)
    if name == "dynamo-planner":
        setup = disaggregated.disaggregated_pools(base, 1, 1, (1, common.BUDGET - 1), (1, common.BUDGET - 1))
        prof = DynamoProfile.sweep(common.latency_model())
        return setup, DynamoPlannerController(
            prof, prof, ttft, itl, common.BUDGET, interval_s=60.0, name="dynamo-planner"
        )
    if name == "hpa-queue":
        return base, HPAQueueController("h200", target=3.0, name="hpa-queue")
    if name.startswith("vllm-"):
        return static.colocated(common.base_setup(s, prefix, seed=run.seed), common.BUDGET,
                                chunked=name == "vllm-chunked")  # fmt: skip
    if name.startswith("static-"):
        x, y = (int(v) for v in name.split("-")[1:])
        return static.static_split(common.base_setup(s, prefix, seed=run.seed), x, y, common.BUDGET)
    p, d = (int(v) for v in name.removeprefix("disagg-").removesuffix("d").split("p"))
    return disaggregated.static_disaggregated(common.base_setup(s, prefix, seed=run.seed), p, d)


def trace_for(run: Run) -> list[Any]:
    if run.day:
        reqs = common.workload("mix-shift", 6.0, seed=run.seed)
        return day_shape(reqs, DAY_S, peak_rate=run.rate, trough=0.2)
    reqs = common.workload(run.trace, run.rate, seed=run.seed)
    return reqs if run.trace in common.SYNTHESISED else [r for r in reqs if r.arrival_s < DURATION_S]


def simulate(run: Run) -> tuple[common.RunResult, list[float], list[common.SimRequest]]:
    """One run in its world: the result, each window's p99 ITL and the requests."""
    reqs = trace_for(run)
    setup, controller = build(run, any(r.hash_ids for r in reqs))
    world = ContentionModel(WORLD.prefill_k, WORLD.decode_k, run.eps)
    return common.judged(setup, reqs, controller, run.policy, Truth(*run.truth, world))


def run_one(run: Run) -> list[dict[str, Any]]:
    result, p99s, requests = simulate(run)
    ttft = common.ttft_slo(run.trace)
    rows = []
    for scale in ("tight", "paper") if run.scale == "both" else (run.scale,):
        sc = common.scored(requests, p99s, ttft, itl_slo(scale))
        paper = sum(w[2] for w in sc.windows) / max(1, result.arrivals)
        rows.append(
            {
                "trace": run.trace,
                "policy": run.policy,
                "rate": run.rate,
                "scale": scale,
                "eps": run.eps,
                "truth": list(run.truth),
                "day": run.day,
                "seed": run.seed,
                "itl_buckets": run.itl_buckets,
                "slo": sc.slo_attainment,
                "paper": paper,
                "itl_windows_met": sc.itl_windows_met,
                "lost": sc.lost,
                "arrivals": result.arrivals,
                "accelerator_hours": result.accelerator_hours,
                "itl_p99": result.itl_p99,
                "windows": sc.windows,
                "wall_s": result.wall_s,
            }
        )
    return rows


def tasks(quick: bool) -> list[Run]:
    out: list[Run] = []
    for tr in TRACES:
        rates = RATES[tr][1::2] if quick else RATES[tr]
        for r in rates:
            out += [Run(tr, p, r) for p in FIXED]
            out += [Run(tr, p, r, scale) for p in GRID_SLO_AWARE for scale in ("tight", "paper")]
    sens_rates = RATES[SENS_TRACE][1::2] if quick else RATES[SENS_TRACE]
    semi = ("ours", *(f"static-{x}-{y}" for x, y in STATIC_SPLITS))
    for eps in INTERFERENCE:
        if eps == WORLD.interference:
            continue
        for r in sens_rates:
            out += [Run(SENS_TRACE, p, r, eps=eps) for p in semi[1:]]
            out += [Run(SENS_TRACE, "ours", r, scale, eps=eps) for scale in ("tight", "paper")]
    for truth in MISMATCH:
        for tr in MISMATCH_TRACES:
            for r in RATES[tr][1::2] if quick else RATES[tr]:
                out += [
                    Run(tr, p, r, truth=truth)
                    for p in (*semi[1:], "vllm-chunked", *(f"disagg-{p}p{d}d" for p, d in DISAGG))
                ]
                out += [Run(tr, "ours", r, scale, truth=truth) for scale in ("tight", "paper")]
    for layout in ITL_LAYOUTS:
        for tr in LAYOUT_TRACES if layout != "sglang" else ():
            for r in RATES[tr][1::2] if quick else RATES[tr]:
                out += [Run(tr, "ours", r, scale, itl_buckets=layout) for scale in ("tight", "paper")]
    for seed in SEEDS:
        for r in SEED_RATES:
            out += [Run("mix-shift", p, r, seed=seed) for p in SEED_STATICS]
            out += [Run("mix-shift", "ours", r, scale, seed=seed) for scale in ("tight", "paper")]
        for r in RATES["mix-shift"][1::2] if quick else RATES["mix-shift"]:
            out += [Run("mix-shift", p, r, seed=seed, truth=PERT_SEED_TRUTH) for p in semi[1:]]
            out += [Run("mix-shift", "ours", r, sc, seed=seed, truth=PERT_SEED_TRUTH) for sc in ("tight", "paper")]
    for p in ("ours", "dynamo-planner", "hpa-queue", "static-100-50", "vllm-chunked", "disagg-6p2d"):
        out.append(Run("mix-shift", p, DAY_PEAK, "tight" if p in SLO_AWARE else "both", day=True))
    out.sort(key=lambda t: (t.trace != "azure-conv", -t.rate))
    return out


def run_flat(run: Run) -> dict[str, Any]:
    started = time.perf_counter()
    rows = run_one(run)
    print(
        f"{run.trace} {run.policy} {run.rate:g} {run.scale} eps={run.eps:g} truth={run.truth} day={run.day}"
        f" {time.perf_counter() - started:.1f}s",
        file=sys.stderr,
        flush=True,
    )
    return {"rows": rows}


# --- analysis -------------------------------------------------------------------------------------


def select(rows: list[dict[str, Any]], **want: Any) -> list[dict[str, Any]]:
    return [r for r in rows if all(r[k] == v for k, v in want.items())]


def max_rate(rows: list[dict[str, Any]], key: str = "slo") -> tuple[float, bool]:
    return common.max_rate_at([(r["rate"], r[key]) for r in rows], TARGET)


def oracle_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (trace, rate, scale): the best static split chosen per 60 s arrival window."""
    out = []
    groups: dict[tuple[str, float, str, float], list[dict[str, Any]]] = {}
    for r in rows:
        if r["policy"].startswith("static-") and not r["day"] and r["truth"] == [1.0, 1.0]:
            groups.setdefault((r["trace"], r["rate"], r["scale"], r["eps"]), []).append(r)
    for (tr, rate, scale, eps), runs in groups.items():
        n = max(len(r["windows"]) for r in runs)
        arrivals = sum(w[0] for w in runs[0]["windows"])
        slo = paper = 0
        for w in range(n):
            slo += max((r["windows"][w][1] if w < len(r["windows"]) else 0) for r in runs)
            paper += max((r["windows"][w][2] if w < len(r["windows"]) else 0) for r in runs)
        out.append(
            {
                "trace": tr,
                "policy": "oracle",
                "rate": rate,
                "scale": scale,
                "eps": eps,
                "truth": [1.0, 1.0],
                "day": False,
                "slo": slo / arrivals,
                "paper": paper / arrivals,
            }
        )
    return out


def headline(
    rows: list[dict[str, Any]],
    tr: str,
    scale: str,
    eps: float = WORLD.interference,
    truth: tuple[float, float] = (1.0, 1.0),
    key: str = "slo",
) -> dict[str, tuple[str, float, bool]]:
    sel = [
        r
        for r in rows
        if r["trace"] == tr and r["scale"] == scale and r["eps"] == eps and r["truth"] == list(truth) and not r["day"]
    ]
    names = sorted({r["policy"] for r in sel})
    rates = {p: max_rate([r for r in sel if r["policy"] == p], key) for p in names}
    out: dict[str, tuple[str, float, bool]] = {p: (p, *rates[p]) for p in names}

    def best(prefix: str) -> tuple[str, float, bool]:
        cands = [(rates[p][0], p) for p in names if p.startswith(prefix)]
        if not cands:
            return ("-", 0.0, False)
        rate, p = max(cands)
        return (p, rate, rates[p][1])

    out["static (best split)"] = best("static-")
    out["xPyD (best ratio)"] = best("disagg-")
    if "disagg-4p4d" in rates:
        out["xPyD 1:1"] = ("disagg-4p4d", *rates["disagg-4p4d"])
    return out


def fmt(rate: float, capped: bool) -> str:
    return f">= {rate:.2f}" if capped else f"{rate:.2f}"


MAIN = (
    "ours",
    "ours-start-80-100",
    "ours-restart",
    "oracle",
    "static (best split)",
    "vllm-chunked",
    "vllm-prefill-first",
    "xPyD 1:1",
    "xPyD (best ratio)",
    "semipd-paper",
    "semipd-code",
    "dynamo-planner",
    "hpa-queue",
)


def slo_by_seed(rows: list[dict[str, Any]], truth: list[float], **want: Any) -> dict[int, float]:
    """SLO attainment per trace seed of the fixed-budget rows matching `want` under `truth`."""
    return {x.get("seed", common.SEED): x["slo"] for x in select(rows, **want) if x["truth"] == truth and not x["day"]}


def seed_table(rows: list[dict[str, Any]], seeded: list[dict[str, Any]]) -> list[str]:
    """Mix-shift SLO attainment per trace seed (seed 0: the headline's runs) and the median."""
    seeds, pool = (common.SEED, *SEEDS), rows + seeded
    out = [
        f"## Mix-shift across trace seeds (SLO attainment; seed {common.SEED} is the headline's draw)",
        "",
        "The mix-shift trace is synthesised (chat and Mooncake documents, 5 % -> 50 % -> 5 %); each seed is"
        " another draw of it. Where ours is below a static split in most seeds, the loss is not one draw's noise.",
        "",
    ]
    for scale in ("tight", "paper"):
        out += [f"{scale} ITL ({itl_slo(scale) * 1000:.0f} ms):", ""]
        out += ["| policy | rate | " + " | ".join(f"seed {s}" for s in seeds) + " | median |"]
        out += ["|---|---|" + "---|" * (len(seeds) + 1)]
        for r in SEED_RATES:
            for p in ("ours", *SEED_STATICS):
                by_seed = slo_by_seed(pool, [1, 1], trace="mix-shift", policy=p, rate=r, scale=scale,
                                      eps=WORLD.interference)  # fmt: skip
                vals = [by_seed.get(s) for s in seeds]
                known = [v for v in vals if v is not None]
                med = f"{statistics.median_high(known):.1%}" if known else "-"
                cells = " | ".join("-" if v is None else f"{v:.1%}" for v in vals)
                out.append(f"| {p} | {r:g} | {cells} | {med} |")
        out.append("")
    return out


def pert_seed_table(rows: list[dict[str, Any]], seeded: list[dict[str, Any]]) -> list[str]:
    """Mix-shift under PERT_SEED_TRUTH: per policy, the median SLO attainment over the trace seeds at each
    rate, and the max rate at >= TARGET of those medians (the best static split picked on medians)."""
    seeds, pool = (common.SEED, *SEEDS), rows + seeded
    truth = list(PERT_SEED_TRUTH)
    out = [
        f"## Mix-shift with prefill x{truth[0]:g}, decode x{truth[1]:g}, across trace seeds (median SLO attainment)",
        "",
        "One broken ITL window costs this world ~10 points, so one draw ranks policies by luck: the medians"
        f" over seeds {', '.join(str(s) for s in seeds)} and the max rate at >= {TARGET:.0%} of them.",
        "",
    ]
    policies = ("ours", *(f"static-{x}-{y}" for x, y in STATIC_SPLITS))
    for scale in ("tight", "paper"):
        out += [f"{scale} ITL ({itl_slo(scale) * 1000:.0f} ms):", ""]
        out += ["| policy | " + " | ".join(f"{r:g}/s" for r in RATES["mix-shift"]) + " | max rate (medians) |"]
        out += ["|---|" + "---|" * (len(RATES["mix-shift"]) + 1)]
        for p in policies:
            medians = {}
            for r in RATES["mix-shift"]:
                by_seed = slo_by_seed(pool, truth, trace="mix-shift", policy=p, rate=r, scale=scale,
                                      eps=WORLD.interference)  # fmt: skip
                if all(s in by_seed for s in seeds):
                    medians[r] = statistics.median_high(by_seed[s] for s in seeds)
            if not medians:
                continue
            cells = " | ".join(f"{medians[r]:.1%}" if r in medians else "-" for r in RATES["mix-shift"])
            out.append(f"| {p} | {cells} | {fmt(*common.max_rate_at(list(medians.items()), TARGET))} |")
        out.append("")
    return out


def layout_table(rows: list[dict[str, Any]], layouts: list[dict[str, Any]]) -> list[str]:
    """Ours' max rate per ITL bucket layout on LAYOUT_TRACES, beside the best static split."""
    out = [
        "## Sensitivity to the engine's ITL histogram buckets (max rate at >= 90 %, product SLO)",
        "",
        "The controller reads each pod's p99 ITL interpolated inside the engine's bucket (ITL_LAYOUTS);"
        " static splits read nothing, so only ours is re-run. SGLang's buckets are every other table's.",
        "",
        "| buckets | " + " | ".join(f"{tr} tight / paper" for tr in LAYOUT_TRACES) + " |",
        "|---|" + "---|" * len(LAYOUT_TRACES),
    ]
    for layout in ITL_LAYOUTS:
        pool = rows if layout == "sglang" else [r for r in layouts if r["itl_buckets"] == layout]
        cells = []
        for tr in LAYOUT_TRACES:
            rates = [headline(pool, tr, scale).get("ours", ("-", float("nan"), False)) for scale in ("tight", "paper")]
            cells.append(" / ".join(fmt(r[1], r[2]) for r in rates))
        out.append(f"| {layout} ({', '.join(f'{b * 1000:g}' for b in ITL_LAYOUTS[layout] if 0.02 <= b <= 0.16)} ms) | "
                   + " | ".join(cells) + " |")  # fmt: skip
    best = [headline(rows, tr, scale)["static (best split)"] for tr in LAYOUT_TRACES for scale in ("tight", "paper")]
    out.append("| best static split (any buckets) | "
               + " | ".join(f"{fmt(best[2 * i][1], best[2 * i][2])} / {fmt(best[2 * i + 1][1], best[2 * i + 1][2])}"
                            for i in range(len(LAYOUT_TRACES))) + " |")  # fmt: skip
    return [*out, ""]


def headline_draw(row: dict[str, Any]) -> bool:
    """The row belongs to the headline's draw: seed SEED and SGLang's ITL buckets (every table but the
    seed and bucket-layout ones, the oracle and the plot)."""
    return row.get("seed", common.SEED) == common.SEED and row.get("itl_buckets", "sglang") == "sglang"


def render(rows: list[dict[str, Any]], wall: float, quick: bool) -> tuple[str, dict[str, Any]]:
    layouts = [r for r in rows if r.get("itl_buckets", "sglang") != "sglang"]
    seeded = [r for r in rows if r.get("seed", common.SEED) != common.SEED]
    rows = [r for r in rows if headline_draw(r)]
    rows = rows + oracle_rows(rows)
    lm = common.latency_model()
    L = [
        "# Fleet simulator: a fair judge (SLO attainment vs request rate)",
        "",
        f"`bench/bench_fleet_attainment.py` (seed {common.SEED}, code {common.code_version()}"
        f"{', --quick' if quick else ''}). Every policy on the same **8 x NVIDIA H200**, Qwen3-32B BF16 TP1 per",
        f"instance (KV pool {lm.kv_capacity_tokens():,} tokens per GPU). Simulations with an estimated latency",
        "model (docs/simulator.md, docs/latency-model.md), not measurements on GPUs.",
        "",
        "- **World**: share-curve contention k_p 0.6, k_d 0.2, interference eps 0.2 (sourced defaults);"
        " every policy's prior is the shipped model (take-turns), so no policy plans with the world's own model.",
        "- **Scoring**: *SLO* = the product's: TTFT <= TTFT SLO and every 60 s window the request decoded in"
        " had token-level p99 ITL <= ITL SLO. *paper* = TTFT and mean TPOT per request (Semi-PD's).",
        f"- **SLO scales**: TTFT = 7.5 x a lone mean prompt's TTFT on a whole GPU for both; ITL *tight* ="
        f" {itl_slo('tight') * 1000:.0f} ms (today's, {itl_slo('tight') / single_tpot():.1f} x a lone request's"
        f" TPOT of {single_tpot() * 1000:.1f} ms), *paper* = 7.5 x = {itl_slo('paper') * 1000:.0f} ms.",
        "- **Oracle**: the best static semi-PD split chosen per 60 s arrival window (from the static runs;"
        " switching is free): an upper bound for any split controller on 8 fixed GPUs.",
        "- SLO-aware controllers (ours, Semi-PD paper/code, Dynamo-style planner, HPA) are run once per scale"
        " and told its SLO; Dynamo and HPA scale replicas (1-8, start at 2), all others hold 8 GPUs.",
        f"- Settings for 2 shared cores: the first {DURATION_S:.0f} s of arrivals of conv, code and Mooncake"
        f" (prefix caching, prefix-aware routing), mix-shift {common.MIX_SHIFT_S:.0f} s"
        " (chat <-> Mooncake documents, 5 % -> 50 % -> 5 %);"
        f" rates (req/s) {'; '.join(f'{t} ' + ', '.join(f'{r:g}' for r in rs) for t, rs in RATES.items())};"
        f" {common.WORKERS} worker processes.",
        "- Max rate = highest rate with attainment >= 90 % (interpolated; '>=' when every grid rate passes).",
        "",
    ]
    summary: dict[str, Any] = {"main": {}, "sensitivity": {}, "day": []}
    for scale in ("tight", "paper"):
        L += [f"## Max rate at >= 90 % attainment, {scale} SLO (ITL {itl_slo(scale) * 1000:.0f} ms)", ""]
        L.append("| policy | " + " | ".join(f"{t} SLO / paper" for t in TRACES) + " |")
        L.append("|---|" + "---|" * len(TRACES))
        tabs = {t: (headline(rows, t, scale), headline(rows, t, scale, key="paper")) for t in TRACES}
        for name in MAIN:
            cells = []
            for t in TRACES:
                a, b = tabs[t]
                if name not in a:
                    cells.append("-")
                    continue
                src = "" if a[name][0] == name else f" ({a[name][0]})"
                cells.append(f"{fmt(a[name][1], a[name][2])} / {fmt(b[name][1], b[name][2])}{src}")
            L.append(f"| {name} | " + " | ".join(cells) + " |")
        L.append("")
        summary["main"][scale] = {t: {k: v[1] for k, v in tabs[t][0].items()} for t in TRACES}
    # attainment curves at the tight scale, conv
    L += ["## Attainment per rate (SLO / paper), azure-conv", ""]
    for scale in ("tight", "paper"):
        L += [
            f"{scale} SLO:",
            "",
            "| policy | " + " | ".join(f"{r:g}/s" for r in RATES["azure-conv"]) + " | lost (top rate) |",
            "|---|" + "---|" * (len(RATES["azure-conv"]) + 1),
        ]
        sel = [
            r
            for r in rows
            if r["trace"] == "azure-conv"
            and r["scale"] == scale
            and r["eps"] == 0.2
            and r["truth"] == [1.0, 1.0]
            and not r["day"]
        ]
        for p in sorted({r["policy"] for r in sel}, key=lambda p: (p != "ours", p)):
            pts = {r["rate"]: r for r in sel if r["policy"] == p}
            cells = " | ".join(
                f"{pts[x]['slo']:.1%} / {pts[x]['paper']:.1%}" if x in pts else "-" for x in RATES["azure-conv"]
            )
            top = pts.get(max(pts)) if pts else None
            lost = ", ".join(f"{k} {v}" for k, v in sorted((top or {}).get("lost", {}).items())) or "none"
            L.append(f"| {p} | {cells} | {lost} |")
        L.append("")
    # sensitivity
    L += [
        "## Sensitivity (azure-conv unless named, max rate at >= 90 %, product SLO)",
        "",
        "Chunked and xPyD do not co-run phases on one GPU, so interference does not change them; the truth"
        " mismatch (prefill, decode time x) changes every policy's world but no policy's prior.",
        "",
    ]
    for scale in ("tight", "paper"):
        L += [
            f"{scale} SLO:",
            "",
            "| world | ours | oracle | static (best) | vllm-chunked | xPyD (best) | ranking |",
            "|---|---|---|---|---|---|---|",
        ]
        base = headline(rows, SENS_TRACE, scale)
        cross: dict[str, float | None] = {"vllm-chunked": None, "xPyD (best ratio)": None}
        for eps in INTERFERENCE:
            h = headline(rows, SENS_TRACE, scale, eps=eps)
            ours = h.get("ours", ("-", float("nan"), False))
            vals = {
                "ours": ours[1],
                "oracle": h.get("oracle", ("", 0.0, False))[1],
                "static": h["static (best split)"][1],
                "chunked": base["vllm-chunked"][1],
                "xPyD": base["xPyD (best ratio)"][1],
            }
            rank = " > ".join(k for k, v in sorted(vals.items(), key=lambda kv: -kv[1]) if v == v)
            L.append(
                f"| eps {eps:g} | {ours[1]:.2f} | {vals['oracle']:.2f} | {vals['static']:.2f}"
                f" ({h['static (best split)'][0]}) | {vals['chunked']:.2f} | {vals['xPyD']:.2f} | {rank} |"
            )
            for k, short in (("vllm-chunked", "chunked"), ("xPyD (best ratio)", "xPyD")):
                if vals["static"] > vals[short]:
                    cross[k] = eps
            summary["sensitivity"].setdefault(scale, {})[f"eps={eps:g}"] = vals
        for tr, truth in itertools.product(MISMATCH_TRACES, MISMATCH):
            h = headline(rows, tr, scale, truth=truth)
            ours = h.get("ours", ("-", float("nan"), False))
            vals = {
                "ours": ours[1],
                "static": h["static (best split)"][1],
                "chunked": h["vllm-chunked"][1],
                "xPyD": h["xPyD (best ratio)"][1],
            }
            rank = " > ".join(k for k, v in sorted(vals.items(), key=lambda kv: -kv[1]) if v == v)
            where = "" if tr == SENS_TRACE else f"{tr}: "
            L.append(
                f"| {where}prefill x{truth[0]:g}, decode x{truth[1]:g} (eps 0.2) | {ours[1]:.2f} | - |"
                f" {vals['static']:.2f} ({h['static (best split)'][0]}) | {vals['chunked']:.2f} | {vals['xPyD']:.2f}"
                f" | {rank} |"
            )
            key = f"truth={truth}" if tr == SENS_TRACE else f"{tr} truth={truth}"
            summary["sensitivity"].setdefault(scale, {})[key] = vals
        L.append("")
        for k, eps in cross.items():
            if eps is None:
                L.append(
                    f"- {scale}: the best static semi-PD split does not beat {k} at any interference in the range"
                    " (ties count as not beating; '>=' rates at the grid top are ties, not losses)."
                )
            else:
                L.append(
                    f"- {scale}: the best static semi-PD split beats {k} for interference <= {eps:g}"
                    " (the highest grid value where it still does)."
                )
            summary["sensitivity"].setdefault(scale, {})[f"crossover vs {k}"] = eps
        L.append("")
    # day
    L += [
        f"## Mix-shift day: accelerator-hours (rate 20 % -> 100 % -> 20 % of {DAY_PEAK:g} req/s over"
        f" {DAY_S:.0f} s, mix 5 % -> 50 % -> 5 % documents)",
        "",
        "| policy | SLO attainment (tight) | paper | accelerator-hours | >= 99 % (SLO) |",
        "|---|---|---|---|---|",
    ]
    for r in sorted((r for r in rows if r["day"] and r["scale"] == "tight"), key=lambda r: r["accelerator_hours"]):
        ok = "yes" if r["slo"] >= 0.99 else "no"
        L.append(f"| {r['policy']} | {r['slo']:.1%} | {r['paper']:.1%} | {r['accelerator_hours']:.2f} | {ok} |")
        summary["day"].append({k: r[k] for k in ("policy", "slo", "paper", "accelerator_hours")})
    L += ["", *seed_table(rows, seeded), *pert_seed_table(rows, seeded), *layout_table(rows, layouts)]
    L += ["## Requests not served, every run (tight-scale rows; reason: count)", ""]
    lost_by: dict[str, dict[str, int]] = {}
    for r in rows + seeded + layouts:
        if r.get("scale") == "tight" and "lost" in r:
            into = lost_by.setdefault(r["policy"], {})
            for k, v in r["lost"].items():
                into[k] = into.get(k, 0) + v
    L += [f"- {p}: " + (", ".join(f"{k} {v}" for k, v in sorted(d.items())) or "none")
          for p, d in sorted(lost_by.items(), key=lambda kv: (not kv[0].startswith("ours"), kv[0]))]  # fmt: skip
    scored = len([r for r in rows + seeded + layouts if r["policy"] != "oracle"])
    L += ["", f"Wall time {wall:.0f} s for {scored} scored rows.", ""]
    return "\n".join(L), summary


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if headline_draw(r)]
    rows = rows + oracle_rows(rows)
    fig, axes = plt.subplots(2, len(TRACES), figsize=(4.6 * len(TRACES), 7.5), squeeze=False)
    for i, scale in enumerate(("tight", "paper")):
        for ax, tr in zip(axes[i], TRACES, strict=True):
            h = headline(rows, tr, scale)
            for label in ("ours", "oracle", "static (best split)", "vllm-chunked", "xPyD 1:1", "xPyD (best ratio)"):
                if label not in h:
                    continue
                src = h[label][0]
                pts = sorted(
                    (r["rate"], r["slo"])
                    for r in rows
                    if r["policy"] == src
                    and r["trace"] == tr
                    and r["scale"] == scale
                    and r["eps"] == 0.2
                    and r["truth"] == [1.0, 1.0]
                    and not r["day"]
                )
                style = {"linewidth": 2.5, "color": "black"} if label == "ours" else {"linewidth": 1.2}
                ax.plot(
                    [p[0] for p in pts],
                    [p[1] for p in pts],
                    marker="o",
                    markersize=3,
                    label=label if src == label else f"{label} ({src})",
                    **style,
                )
            ax.axhline(TARGET, color="grey", linestyle="--", linewidth=0.8)
            ax.set_title(f"{tr}, {scale} SLO")
            ax.set_xlabel("request rate (req/s, 8 x H200)")
            ax.set_ylabel("SLO attainment (TTFT + window p99 ITL)")
            ax.set_ylim(0, 1.02)
            ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="every other rate of each trace")
    ap.add_argument("--out", default=str(RESULTS / "fleet_attainment"))
    args = ap.parse_args()
    started = time.perf_counter()
    rows = [row for part in common.run_all(tasks(args.quick), run_flat) for row in part["rows"]]
    wall = time.perf_counter() - started
    text, summary = render(rows, wall, args.quick)
    out = Path(args.out)
    out.with_suffix(".md").write_text(text, encoding="utf-8")
    slim = [{k: v for k, v in r.items() if k != "windows"} for r in rows]
    out.with_suffix(".json").write_text(json.dumps({"rows": slim, "summary": summary}, indent=1))
    plot(rows, out.with_suffix(".png"))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
