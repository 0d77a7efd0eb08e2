"""Benchmark: KV-cache placement on a mixed H200 + Ascend 910B fleet under the Mooncake trace (long prompts).

Same fleet, trace window and rate for every variant, side by side:
- `off`: placement.kvCache.policy off, the router ignores context length (baseline);
- `labels`: policy headroom, the router filters on the pods' llm-d context-length-range labels;
- `weights`: policy headroom, the router splits each length class by the HTTPRoute pool weights.
The placement is re-planned by the shipped `plan_kv_placement` every autoscaling interval from the
scraped KV usage. Every variant uses the prefix-aware router and a per-instance prefix cache (the
trace carries block hashes), static replicas and splits (no autoscaler, so only routing differs),
and the same KV admission bound. Three 2,000-request windows of the trace per point; medians.
Writes bench/results/fleet_kv.{md,json,png}.

    .venv/bin/python bench/bench_fleet_kv.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bench_fleet_common as common

from semipd.api.v1alpha1 import InferencePoolSpec
from semipd.policy.kvcache import kv_capacity_tokens
from semipd.sim.fleet.fleet import Simulator
from semipd.sim.fleet.router import KVRouting, RouterConfig, RouterKind
from semipd.sim.fleet.setup import fleet_from_spec
from semipd.traces import TraceRequest, prepare, scale_to_rate, shift

RESULTS = Path(__file__).resolve().parent / "results"
MODEL = "llama-3-8b"
"""The default model profile (DEFAULT_PROFILE for dense models)."""
CONTEXT = 131072
THRESHOLD = 32768
TTFT_SLO = "10s"
"""As the Mooncake SLO of bench_fleet_attainment."""
ITL_SLO = "100ms"
"""Looser than the H200-only benchmarks' 50 ms: a 910B3 decode step at batch 32 and 12k context is ~66 ms."""
KV_WAIT_S = 30.0
"""A request blocked on KV at the head of an instance's queue is rejected after this long [est: a client timeout]."""
FLEETS = {
    "2 x H200 + 4 x 910B3": ("910B3", 2, 4),
    "2 x H200 + 4 x 910B4 (32 GB)": ("910B4", 2, 4),
}
RATES = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0)
WINDOWS = (0, 5000, 10000)
WINDOW_REQUESTS = 2000
VARIANTS = {"off": ("off", KVRouting.LABELS), "labels": ("headroom", KVRouting.LABELS),
            "weights": ("headroom", KVRouting.WEIGHTS)}  # fmt: skip


def spec(chip: str, n_h200: int, n_ascend: int, policy: str) -> InferencePoolSpec:
    def pool(name: str, accelerator: str, label: dict[str, str], n: int) -> dict[str, Any]:
        return {"name": name, "accelerator": accelerator, "nodeSelector": label, "minReplicas": n, "maxReplicas": n}

    return InferencePoolSpec.model_validate(
        {
            "model": {"name": MODEL, "source": "hf://m/m", "profile": MODEL, "maxContextLength": CONTEXT},
            "engine": {"kind": "sim"},
            "nodePools": [
                pool("h200", "nvidia", {"nvidia.com/gpu.product": "NVIDIA-H200"}, n_h200),
                pool("ascend", "ascend", {"node.kubernetes.io/npu.chip.name": chip}, n_ascend),
            ],
            "semiPD": {"initialPrefillPercent": 80, "initialDecodePercent": 100},
            "slo": {"ttftP99": TTFT_SLO, "itlP99": ITL_SLO, "window": "1m"},
            "autoscaling": {"mode": "off", "interval": "15s"},
            "placement": {"kvCache": {"policy": policy, "longContextThreshold": THRESHOLD}},
        }
    )


_TRACE: list[TraceRequest] = []


def window(start: int, rate: float) -> list[TraceRequest]:
    if not _TRACE:
        _TRACE.extend(prepare("mooncake", context_length=CONTEXT))
    part = _TRACE[start : start + WINDOW_REQUESTS]
    return scale_to_rate(shift(part, -part[0].arrival_s), rate)


@dataclass(frozen=True)
class Task:
    fleet: str
    variant: str
    rate: float
    start: int


def run(task: Task) -> dict[str, Any]:
    chip, nh, na = FLEETS[task.fleet]
    policy, routing = VARIANTS[task.variant]
    s = spec(chip, nh, na, policy)
    setup = fleet_from_spec(s, seed=common.SEED, kv_routing=routing, kv_wait_s=KV_WAIT_S, prefix_cache=True,
                            router=RouterConfig(kind=RouterKind.PREFIX_AWARE))  # fmt: skip
    sim = Simulator(setup)
    result = sim.run(window(task.start, task.rate), name=task.variant)
    slo_t, slo_i = result.ttft_slo_s, result.itl_slo_s
    long = [r for r in sim.requests if r.input > THRESHOLD]
    short = [r for r in sim.requests if r.input <= THRESHOLD]
    long_on = [r.instance.pool for r in long if r.instance is not None]
    return {
        "fleet": task.fleet,
        "variant": task.variant,
        "rate": task.rate,
        "window": task.start,
        "attainment": result.attainment,
        "long_attainment": sum(r.attains(slo_t, slo_i) for r in long) / len(long) if long else math.nan,
        "short_attainment": sum(r.attains(slo_t, slo_i) for r in short) / len(short) if short else math.nan,
        "kv_rejections": result.kv_rejections,
        "rejected": dict(result.rejected),
        "ttft_p50": result.ttft_p50,
        "ttft_p99": result.ttft_p99,
        "tpot_p99": result.tpot_p99,
        "long_requests": len(long),
        "long_on_h200": long_on.count("h200") / len(long_on) if long_on else math.nan,
        "placement_changes": max(0, len(result.kv_placement) - 1),
        "wall_s": result.wall_s,
    }


def medians(rows: list[dict[str, Any]]) -> dict[tuple[str, str, float], dict[str, float]]:
    groups: dict[tuple[str, str, float], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["fleet"], r["variant"], r["rate"]), []).append(r)
    keys = ("attainment", "long_attainment", "short_attainment", "kv_rejections", "ttft_p50", "ttft_p99",
            "tpot_p99", "long_on_h200", "placement_changes")  # fmt: skip
    out = {}
    for k, rs in groups.items():
        out[k] = {m: statistics.median(r[m] for r in rs) for m in keys}
        out[k]["windows"] = len(rs)
    return out


def render(rows: list[dict[str, Any]], wall: float) -> tuple[str, dict[str, Any]]:
    med = medians(rows)
    rates = sorted({r["rate"] for r in rows})
    lines = [
        "# Fleet simulator: KV-cache placement across H200 and Ascend 910B pools (Mooncake trace)",
        "",
        f"`bench/bench_fleet_kv.py` (seed {common.SEED}, code {common.code_version()}). Model {MODEL} (BF16, TP1,",
        f"the default profile), max context {CONTEXT:,} tokens, long-context threshold {THRESHOLD:,} (API default),",
        "hysteresis 0.1. Mooncake conversation trace with prompts cut to fit the context only: "
        f"{sum(1 for r in _TRACE if r.input_tokens > THRESHOLD) / max(1, len(_TRACE)):.1%} of prompts are long.",
        f"SLOs: TTFT {TTFT_SLO}, ITL {ITL_SLO} (mean inter-token time). KV admission: prompt + output reserved at",
        f"admission; a request blocked on KV at a queue head is rejected after {KV_WAIT_S:.0f} s (`kv-wait`).",
        "Static replicas and splits (80/100): only routing differs. Prefix-aware router and prefix cache everywhere.",
        f"Each point: median over {len(WINDOWS)} windows of {WINDOW_REQUESTS:,} requests (trace offsets "
        f"{', '.join(str(w) for w in WINDOWS)}), rescaled to the rate.",
        "",
        "- **off**: `policy: off` -- the router ignores context length (baseline).",
        "- **labels**: `policy: headroom`, router filters on the pods' llm-d `context-length-range` label.",
        "- **weights**: `policy: headroom`, router splits each length class by the published pool weights.",
        "",
        "KV capacity per replica (`kv_capacity_tokens`: (HBM x 0.9 - weights) / KV bytes per token):",
        "",
    ]
    for name, (chip, nh, na) in FLEETS.items():
        s = spec(chip, nh, na, "headroom")
        caps = ", ".join(f"{p.name} {kv_capacity_tokens(s, p):,}" for p in s.node_pools)
        lines.append(f"- {name}: {caps}")
    lines.append("")
    for fleet in FLEETS:
        lines += [
            f"## {fleet}",
            "",
            "| rate (req/s) | attainment off / labels / weights | long prompts' attainment | short prompts' "
            "attainment | KV rejections | p99 TTFT (s) | long prompts on H200 | placement changes |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for rate in rates:
            cells = [med.get((fleet, v, rate)) for v in VARIANTS]
            if any(c is None for c in cells):
                continue

            def row(metric: str, fmt: str, cs: list[dict[str, float] | None] = cells) -> str:
                return " / ".join(format(c[metric], fmt) if c is not None else "-" for c in cs)

            lines.append(
                f"| {rate:g} | {row('attainment', '.1%')} | {row('long_attainment', '.1%')} | "
                f"{row('short_attainment', '.1%')} | {row('kv_rejections', '.0f')} | {row('ttft_p99', '.1f')} | "
                f"{row('long_on_h200', '.0%')} | {row('placement_changes', '.0f')} |"
            )
        best = []
        for v in VARIANTS:
            pts = [(r, med[(fleet, v, r)]["attainment"]) for r in rates if (fleet, v, r) in med]
            rate, capped = common.max_rate_at(pts, 0.9)
            best.append(f"{v} {'>= ' if capped else ''}{rate:.2f}")
        lines += ["", f"Highest rate at >= 90 % attainment (interpolated): {', '.join(best)} req/s."]
        lines.append("")
    lines += [
        "Every cell is off / labels / weights. KV rejections are `kv` (never fits) plus `kv-wait` (waited past the",
        "bound), out of 2,000 requests.",
        "",
        f"Total wall time {wall:.0f} s. Simulation on the estimated latency model (docs/latency-model.md), not a",
        "measurement on accelerators.",
        "",
    ]
    doc = {
        "model": MODEL,
        "context": CONTEXT,
        "threshold": THRESHOLD,
        "slo": {"ttft": TTFT_SLO, "itl": ITL_SLO},
        "kv_wait_s": KV_WAIT_S,
        "code": common.code_version(),
        "rows": rows,
        "medians": [{"fleet": f, "variant": v, "rate": r, **m} for (f, v, r), m in sorted(med.items())],
    }
    return "\n".join(lines), doc


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    med = medians(rows)
    rates = sorted({r["rate"] for r in rows})
    fig, axes = plt.subplots(len(FLEETS), 3, figsize=(14, 4 * len(FLEETS)), squeeze=False)
    for i, fleet in enumerate(FLEETS):
        for j, (metric, label) in enumerate(
            (
                ("attainment", "SLO attainment"),
                ("long_attainment", "long prompts' attainment"),
                ("kv_rejections", "KV-cache rejections"),
            )
        ):
            ax = axes[i][j]
            for v in VARIANTS:
                ys = [med[(fleet, v, r)][metric] if (fleet, v, r) in med else math.nan for r in rates]
                ax.plot(rates, ys, marker="o", label=v)
            ax.set_title(f"{fleet}: {label}", fontsize=9)
            ax.set_xlabel("request rate (req/s)")
            ax.grid(alpha=0.3)
            if metric != "kv_rejections":
                ax.set_ylim(0, 1.02)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one window, two rates (smoke test)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    rates = (0.5, 1.5) if args.quick else RATES
    windows = WINDOWS[:1] if args.quick else WINDOWS
    window(0, 1.0)  # load the trace before forking
    tasks = [Task(f, v, r, w) for f in FLEETS for r in rates for w in windows for v in VARIANTS]
    started = time.perf_counter()
    rows = common.run_all(tasks, run)
    wall = time.perf_counter() - started
    text, doc = render(rows, wall)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fleet_kv.md").write_text(text)
    (args.out / "fleet_kv.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    plot(rows, args.out / "fleet_kv.png")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
