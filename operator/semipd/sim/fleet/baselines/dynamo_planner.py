"""NVIDIA Dynamo's throughput-based SLA planner (baselines.md §3) scaling a disaggregated fleet.

Every adjustment interval I: frontend means over I (TTFT, ITL, request duration, ISL, OSL) and the
request count; correction factors against the pre-deployment profile; next-interval load from the
predictor; prefill replicas from prompt-token throughput per GPU, decode replicas from the best
per-GPU decode throughput whose ITL meets ITL_SLA / d_corr; at least `min_endpoint` each; scaled
into `max_gpu_budget`. The profile is swept from the same latency model the fleet runs (what the
profiler would measure on it); interpolation is piecewise linear (Dynamo: cubic, scipy), the load
predictor `constant` (Dynamo's default ARIMA needs pmdarima).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

from semipd.perf import LatencyModel
from semipd.sim.fleet.controller import Action, FleetView, Note, SetReplicas

from .disaggregated import DECODE_POOL, PREFILL_POOL

ADJUSTMENT_INTERVAL_S = 180.0
MIN_ENDPOINT = 1
ISL_GRID = (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
KV_USAGE_GRID = tuple(k / 20 for k in range(1, 21))
CONTEXT_GRID = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768)


def _interp(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = bisect_left(xs, x)
    x0, x1 = xs[i - 1], xs[i]
    return ys[i - 1] + (ys[i] - ys[i - 1]) * (x - x0) / (x1 - x0)


@dataclass(frozen=True)
class DynamoProfile:
    """Prefill: isl -> (ttft, tokens/s/GPU); decode: (kv usage, context) -> (itl, tokens/s/GPU)."""

    isl: tuple[float, ...]
    ttft: tuple[float, ...]
    prefill_thpt: tuple[float, ...]
    contexts: tuple[float, ...]
    kv_usage: tuple[float, ...]
    itl: tuple[tuple[float, ...], ...]
    """[context][kv usage]."""
    decode_thpt: tuple[tuple[float, ...], ...]
    max_kv_tokens: int

    @classmethod
    def sweep(cls, model: LatencyModel) -> DynamoProfile:
        gpus = model.tp
        ttft = tuple(model.prefill_time([n], 1.0) for n in ISL_GRID)
        thpt = tuple(n / t / gpus for n, t in zip(ISL_GRID, ttft, strict=True))
        kv = model.kv_capacity_tokens()
        itl_rows, thpt_rows = [], []
        for ctx in CONTEXT_GRID:
            row_i, row_t = [], []
            for u in KV_USAGE_GRID:
                b = max(1, int(u * kv / ctx))
                step = model.decode_step_time(b, b * ctx, 1.0)
                row_i.append(step)
                row_t.append(b / step / gpus)
            itl_rows.append(tuple(row_i))
            thpt_rows.append(tuple(row_t))
        return cls(tuple(map(float, ISL_GRID)), ttft, thpt, tuple(map(float, CONTEXT_GRID)), KV_USAGE_GRID,
                   tuple(itl_rows), tuple(thpt_rows), kv)  # fmt: skip

    def prefill_ttft(self, isl: float) -> float:
        return _interp(self.isl, self.ttft, isl)

    def prefill_throughput(self, isl: float) -> float:
        return _interp(self.isl, self.prefill_thpt, isl)

    def _rows(self, context: float) -> list[tuple[float, float, float]]:
        """The decode grid re-interpolated at `context`: (kv usage, itl, thpt) per usage point."""
        out: list[tuple[float, float, float]] = []
        for k, u in enumerate(self.kv_usage):
            itl = _interp(self.contexts, [row[k] for row in self.itl], context)
            thpt = _interp(self.contexts, [row[k] for row in self.decode_thpt], context)
            out.append((u, itl, thpt))
        return out

    def decode_itl(self, concurrency: float, context: float) -> float:
        usage = concurrency * context / self.max_kv_tokens
        rows = self._rows(context)
        return _interp([u for u, _, _ in rows], [i for _, i, _ in rows], usage)

    def best_decode_throughput(self, itl_target: float, context: float) -> float:
        """Max tokens/s/GPU with ITL <= target at `context` (the lowest grid point if none meets it)."""
        rows = self._rows(context)
        ok = [t for _, i, t in rows if i <= itl_target]
        return max(ok) if ok else rows[0][2]


class DynamoPlannerController:
    def __init__(self, profile_prefill: DynamoProfile, profile_decode: DynamoProfile, ttft_sla_s: float,
                 itl_sla_s: float, max_gpu_budget: int, interval_s: float = ADJUSTMENT_INTERVAL_S,
                 prefill_gpus: int = 1, decode_gpus: int = 1, correction: bool = True,
                 name: str = "dynamo-planner") -> None:  # fmt: skip
        self.pp, self.dp = profile_prefill, profile_decode
        self.ttft_sla, self.itl_sla = ttft_sla_s, itl_sla_s
        self.budget = max_gpu_budget
        self._interval = interval_s
        self.gp, self.gd = prefill_gpus, decode_gpus
        self.correction = correction
        self._name = name
        self._notes: list[Note] = []

    @property
    def name(self) -> str:
        return self._name

    @property
    def interval_s(self) -> float:
        return self._interval

    def control(self, view: FleetView) -> Sequence[Action]:
        now, interval = view.now, self._interval
        done = [r for r in view.finished_between(now - interval, now) if not r.rejected]
        num_req = view.arrivals_between(now - interval, now)
        if not done or num_req == 0:
            return ()
        ttft = sum(r.ttft for r in done) / len(done)
        gaps = sum(r.output - 1 for r in done)
        itl = sum(r.finish - r.first_token for r in done) / gaps if gaps else 0.0
        duration = sum(r.finish - r.arrival for r in done) / len(done)
        isl = sum(r.input for r in done) / len(done)
        osl = sum(r.output for r in done) / len(done)
        pools = view.pools()
        num_d_now = max(1, len(pools[DECODE_POOL].ready()))
        p_corr = d_corr = 1.0
        if self.correction:
            p_corr = ttft / self.pp.prefill_ttft(isl)
            concurrency = num_req / num_d_now * duration / interval
            modelled = self.dp.decode_itl(concurrency, isl + osl / 2)
            d_corr = itl / modelled if itl > 0 and modelled > 0 else 1.0
        # Constant predictor: the next interval looks like this one.
        num_p = math.ceil(num_req * isl / interval * min(1.0, p_corr) / (self.pp.prefill_throughput(isl) * self.gp))
        thpt_d = self.dp.best_decode_throughput(self.itl_sla / d_corr, isl + osl / 2)
        num_d = math.ceil(num_req * osl / interval / (thpt_d * self.gd))
        num_p, num_d = max(MIN_ENDPOINT, num_p), max(MIN_ENDPOINT, num_d)
        total = num_p * self.gp + num_d * self.gd
        if total > self.budget:
            scale = self.budget / total
            num_p = max(MIN_ENDPOINT, round(num_p * scale))
            num_d = max(MIN_ENDPOINT, (self.budget - num_p * self.gp) // self.gd)
        actions: list[Action] = []
        for pool, n in ((PREFILL_POOL, num_p), (DECODE_POOL, num_d)):
            if n != pools[pool].desired:
                actions.append(SetReplicas(pool, n, "dynamo"))
        if actions:
            self._notes.append(
                Note(now, "Scale", "ThroughputPlan", None, None,
                     f"prefill {pools[PREFILL_POOL].desired}->{num_p}, decode {pools[DECODE_POOL].desired}->{num_d} "
                     f"(req {num_req}/{interval:g}s, isl {isl:.0f}, osl {osl:.0f}, p_corr {p_corr:.2f}, "
                     f"d_corr {d_corr:.2f})")
            )  # fmt: skip
        return actions

    def notes(self) -> Sequence[Note]:
        return self._notes
