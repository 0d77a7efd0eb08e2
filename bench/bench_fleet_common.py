"""Shared setup of the fleet benchmarks: hardware budget, model, traces, SLOs, policies, runner.

Budget: 8 NVIDIA H200 (one HGX node), Qwen3-32B (BF16, TP1: 65.6 GB of weights, ~230k KV tokens
per GPU), every policy on the same 8 GPUs (fixed-budget runs) or capped at 8 (autoscaled runs).
SLOs by one rule for every trace: p99 TTFT = 7.5 x the single-request TTFT of the trace's mean
prompt on a whole GPU (the Semi-PD paper's "tight" factor), rounded to 2 significant digits;
p99 ITL = 50 ms (Dynamo's default ITL SLA). The world is the fair judge's (WORLD: share-curve
contention; every policy plans with the shipped prior). Attainment by the product's SLO counts a
request when TTFT <= the TTFT SLO and every 60 s window it decoded in had a token-level p99 ITL
<= the ITL SLO; the papers' counts its mean inter-token time (TPOT) instead.
"""

from __future__ import annotations

import math
import multiprocessing
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from semipd.api.durations import format_seconds
from semipd.api.v1alpha1 import InferencePoolSpec
from semipd.perf import ContentionModel, LatencyModel
from semipd.sim.fleet.baselines import disaggregated, static
from semipd.sim.fleet.baselines.dynamo_planner import DynamoPlannerController, DynamoProfile
from semipd.sim.fleet.baselines.hpa_queue import HPAQueueController
from semipd.sim.fleet.baselines.semipd_code import SemiPDCodeController
from semipd.sim.fleet.baselines.semipd_paper import SemiPDPaperController
from semipd.sim.fleet.controller import Controller
from semipd.sim.fleet.fleet import Simulator
from semipd.sim.fleet.policy import PolicyController
from semipd.sim.fleet.requests import SimRequest
from semipd.sim.fleet.results import FINE_ITL_BOUNDS, RunResult
from semipd.sim.fleet.router import RouterConfig, RouterKind
from semipd.sim.fleet.scoring import SLO_WINDOW_S, SloScore, slo_score
from semipd.sim.fleet.setup import FleetSetup, fleet_from_spec
from semipd.sim.fleet.truth import Truth, with_truth
from semipd.traces import TraceRequest, mix_shift, prepare

HARDWARE = "h200"
MODEL = "qwen3-32b"
CONTEXT = 32768
BUDGET = 8
ITL_SLO_S = 0.05
TTFT_FACTOR = 7.5
TRACES = ("azure-conv", "azure-code", "mooncake")
MAX_REQUESTS = {"azure-conv": None, "azure-code": None, "mooncake": 2500}
"""Requests per run (Mooncake's 12k-token prompts make the full trace hours of simulated time)."""
SEED = 0
WORLD = ContentionModel()
"""The fair judge's world: share-curve contention at the sourced defaults (k_p 0.6, k_d 0.2, eps 0.2),
not the take-turns prior every policy plans with."""
WORKERS = int(os.environ.get("SEMIPD_BENCH_WORKERS", "2"))


def code_version() -> str:
    """The repository commit the results were produced at (with a marker for local changes)."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "operator"], cwd=root, capture_output=True,
                               text=True, timeout=10, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+local changes" if dirty else "")


def latency_model() -> LatencyModel:
    return LatencyModel.from_names(HARDWARE, MODEL)


def round2(x: float) -> float:
    digits = 1 - math.floor(math.log10(abs(x)))
    return round(x, digits)


TTFT_OVERRIDE: dict[str, float] = {}
"""Trace -> TTFT SLO replacing the rule (set before run_all: forked workers inherit it)."""


def ttft_slo(trace: str) -> float:
    if trace in TTFT_OVERRIDE:
        return TTFT_OVERRIDE[trace]
    reqs = workload(trace, None) if trace in SYNTHESISED else prepare(trace, context_length=CONTEXT)
    mean_prompt = sum(r.input_tokens for r in reqs) / len(reqs)
    return round2(TTFT_FACTOR * latency_model().prefill_time([round(mean_prompt)], 1.0))


def spec(trace: str, *, mode: str = "semipd", lo: int = BUDGET, hi: int = BUDGET, prefill: int | None = None,
         decode: int | None = None, interval: str = "15s", itl: str = "50ms", engine: str = "sim",
         ) -> InferencePoolSpec:  # fmt: skip
    """The benchmark pool; the start split is the API's default unless given."""
    start = {"initialPrefillPercent": prefill, "initialDecodePercent": decode}
    return InferencePoolSpec.model_validate(
        {
            "model": {"name": MODEL, "source": "hf://Qwen/Qwen3-32B", "profile": MODEL, "maxContextLength": CONTEXT},
            "engine": {"kind": engine},
            "nodePools": [
                {
                    "name": "h200",
                    "accelerator": "nvidia",
                    "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"},
                    "minReplicas": lo,
                    "maxReplicas": hi,
                    "costPerHour": 1.0,
                }
            ],
            "semiPD": {
                **{k: v for k, v in start.items() if v is not None},
                "minPrefillPercent": 20,
                "maxPrefillPercent": 100,
                "stepPercent": 10,
            },
            "slo": {"ttftP99": format_seconds(ttft_slo(trace)), "itlP99": itl, "window": "1m"},
            "autoscaling": {"mode": mode, "interval": interval, "scaleDownStabilization": "5m"},
        }
    )


MIX_SHIFT_S = 600.0
"""The mix-shift day, compressed: chat at the start and end, up to half long documents mid-day."""
SYNTHESISED = ("mix-shift",)


def workload(trace: str, rate: float | None, seed: int = SEED) -> list[TraceRequest]:
    if trace == "mix-shift":
        chat = prepare("azure-conv", context_length=CONTEXT)
        docs = prepare("mooncake", context_length=CONTEXT)
        return mix_shift(chat, docs, MIX_SHIFT_S, rate or 4.0, (0.05, 0.5), seed=seed)
    return prepare(trace, context_length=CONTEXT, rate=rate, max_requests=MAX_REQUESTS.get(trace))


def base_setup(s: InferencePoolSpec, prefix: bool, replicas: int | None = None, seed: int = SEED) -> FleetSetup:
    setup = fleet_from_spec(s, replicas={"h200": replicas} if replicas is not None else None, seed=seed)
    kind = RouterKind.PREFIX_AWARE if prefix else RouterKind.LEAST_OUTSTANDING
    return replace(setup, prefix_cache=prefix, router=RouterConfig(kind=kind))


Factory = Callable[[str, bool], tuple[FleetSetup, Controller]]


def fixed_budget_policies() -> dict[str, Factory]:
    """Every policy on exactly BUDGET GPUs (name -> factory(trace, prefix))."""

    def ours(trace: str, prefix: bool) -> tuple[FleetSetup, Controller]:
        s = spec(trace)
        return base_setup(s, prefix), PolicyController(s, "ours")

    def ours_d50(trace: str, prefix: bool) -> tuple[FleetSetup, Controller]:
        # The planner moves only the prefill share; this starts it at the decode share the static
        # search favours (a spec setting, initialDecodePercent, not a code change).
        s = spec(trace, decode=50)
        return base_setup(s, prefix), PolicyController(s, "ours (decode 50 %)")

    def paper(trace: str, prefix: bool) -> tuple[FleetSetup, Controller]:
        s = spec(trace)
        return base_setup(s, prefix), SemiPDPaperController(ttft_slo(trace), ITL_SLO_S)

    def code(trace: str, prefix: bool) -> tuple[FleetSetup, Controller]:
        s = spec(trace)
        return base_setup(s, prefix), SemiPDCodeController(ttft_slo(trace), ITL_SLO_S)

    def vllm(chunked: bool) -> Factory:
        def make(trace: str, prefix: bool) -> tuple[FleetSetup, Controller]:
            return static.colocated(base_setup(spec(trace), prefix), BUDGET, chunked=chunked)

        return make

    out: dict[str, Factory] = {
        "ours": ours,
        "ours (decode 50 %)": ours_d50,
        "semipd-paper": paper,
        "semipd-code": code,
        "vllm-chunked": vllm(True),
        "vllm-prefill-first": vllm(False),
    }
    return out


def static_split_factory(x: int, y: int) -> Factory:
    def make(trace: str, prefix: bool) -> tuple[FleetSetup, Controller]:
        return static.static_split(base_setup(spec(trace), prefix), x, y, BUDGET)

    return make


def disagg_factory(p: int, d: int) -> Factory:
    def make(trace: str, prefix: bool) -> tuple[FleetSetup, Controller]:
        return disaggregated.static_disaggregated(base_setup(spec(trace), prefix), p, d)

    return make


STATIC_SPLITS = ((40, 100), (60, 100), (80, 100), (100, 100), (100, 80), (100, 60), (100, 50), (100, 40))
"""The best-static search grid: prefill share at full decode, then decode share at full prefill."""


def all_fixed_budget() -> dict[str, Factory]:
    out = fixed_budget_policies()
    for x, y in STATIC_SPLITS:
        out[f"static-{x}-{y}"] = static_split_factory(x, y)
    for p, d in disaggregated.ratios(BUDGET):
        out[f"disagg-{p}p{d}d"] = disagg_factory(p, d)
    return out


DAY_FIXED_SPLITS = ((80, 100), (100, 50), (100, 40), (90, 40))
"""Fixed splits under replica-only scaling (ours, autoscaling.mode=replicas): Semi-PD's default, the
product's start, and the fair judge's best static splits."""


def autoscaled_policies(trace: str) -> dict[str, Factory]:
    """Replica scalers capped at BUDGET, starting from one replica per role."""

    def ours(mode: str, prefill: int | None, decode: int | None) -> Factory:
        def make(tr: str, prefix: bool) -> tuple[FleetSetup, Controller]:
            s = spec(tr, mode=mode, lo=1, hi=BUDGET, prefill=prefill, decode=decode)
            return base_setup(s, prefix, replicas=2), PolicyController(s, f"ours-{mode}-{prefill}-{decode}")

        return make

    def hpa(target: float) -> Factory:
        def make(tr: str, prefix: bool) -> tuple[FleetSetup, Controller]:
            s = spec(tr, mode="off", lo=1, hi=BUDGET)
            return base_setup(s, prefix, replicas=2), HPAQueueController("h200", target=target,
                                                                         name=f"hpa-queue-{target:g}")  # fmt: skip

        return make

    def dynamo(interval_s: float) -> Factory:
        def make(tr: str, prefix: bool) -> tuple[FleetSetup, Controller]:
            base = base_setup(spec(tr, lo=1, hi=BUDGET), prefix)
            setup = disaggregated.disaggregated_pools(base, 1, 1, (1, BUDGET - 1), (1, BUDGET - 1))
            prof = DynamoProfile.sweep(latency_model())
            ctl = DynamoPlannerController(prof, prof, ttft_slo(tr), ITL_SLO_S, BUDGET, interval_s=interval_s,
                                          name=f"dynamo-planner-{interval_s:g}s")  # fmt: skip
            return setup, ctl

        return make

    return {
        "ours (semipd)": ours("semipd", None, None),
        "ours (semipd, start 80/100)": ours("semipd", 80, 100),
        **{f"ours (replicas only, {x}/{y})": ours("replicas", x, y) for x, y in DAY_FIXED_SPLITS},
        "dynamo-planner (180 s)": dynamo(180.0),
        "dynamo-planner (60 s)": dynamo(60.0),
        "hpa-queue (target 3)": hpa(3.0),
        "hpa-queue (target 1)": hpa(1.0),
    }


@dataclass(frozen=True)
class Task:
    trace: str
    policy: str
    rate: float
    kind: str = "fixed"
    """fixed (fixed-budget factories) | auto (autoscaled, day-shaped trace)."""
    day_s: float = 0.0


def judged(setup: FleetSetup, reqs: Sequence[TraceRequest], controller: Controller | None, name: str,
           truth: Truth | None = None) -> tuple[RunResult, list[float], list[SimRequest]]:  # fmt: skip
    """Run in the fair judge's world (or `truth`): the result, each 60 s window's token-level p99 ITL,
    and the requests (for scoring at any SLO)."""
    sim = Simulator(with_truth(setup, truth or Truth(1.0, 1.0, WORLD)), controller)
    result = sim.run(reqs, name)
    return result, sim.itl_windows.p99s(FINE_ITL_BOUNDS), sim.requests


def scored(requests: Sequence[SimRequest], p99s: Sequence[float], ttft: float, itl: float) -> SloScore:
    return slo_score(requests, ttft, itl, p99s, SLO_WINDOW_S)


def run_task(task: Task, trace_requests: Sequence[TraceRequest] | None = None) -> dict[str, Any]:
    factories = all_fixed_budget() if task.kind == "fixed" else autoscaled_policies(task.trace)
    reqs = list(trace_requests) if trace_requests is not None else workload(task.trace, task.rate)
    prefix = any(r.hash_ids for r in reqs)
    setup, controller = factories[task.policy](task.trace, prefix)
    return summarised(task, *judged(setup, reqs, controller, task.policy))


def summarised(task: Task, result: RunResult, p99s: Sequence[float], requests: Sequence[SimRequest]) -> dict[str, Any]:
    """The run's summary with its attainment by the product's SLO (`slo`) beside the papers' (`attainment`)."""
    out = result.summary()
    out.update({"trace": task.trace, "policy": task.policy, "rate": task.rate})
    out["slo"] = scored(requests, p99s, ttft_slo(task.trace), ITL_SLO_S).slo_attainment
    if task.kind == "auto":
        out["timeline"] = [
            {"t": s.time, "rate": s.arrival_rate, "accelerators": s.accelerators, "attained": s.attained}
            for s in result.timeline
        ]
    return out


T = TypeVar("T")


def run_all(tasks: Iterable[T], fn: Callable[[T], dict[str, Any]]) -> list[dict[str, Any]]:
    items = list(tasks)
    if WORKERS <= 1:
        return [fn(t) for t in items]
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(WORKERS) as pool:
        return list(pool.imap(fn, items, chunksize=1))


def max_rate_at(points: Sequence[tuple[float, float]], target: float = 0.9) -> tuple[float, bool]:
    """Highest rate with attainment >= target: linear interpolation between the last passing grid point
    and the first failing one; (rate, True) if every grid point passes (the rate is then a lower bound)."""
    pts = sorted(points)
    for i, (rate, att) in enumerate(pts):
        if att < target:
            if i == 0:
                return 0.0, False
            r0, a0 = pts[i - 1]
            return r0 + (rate - r0) * (a0 - target) / (a0 - att), False
    return (pts[-1][0] if pts else 0.0), True
