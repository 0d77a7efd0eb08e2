"""What one simulation run produced: per-request outcomes reduced to SLO attainment, latency
percentiles, accelerator-hours and cost, plus the timeline and the decisions taken.

Attainment is exact and per request (served, TTFT <= the TTFT SLO and mean inter-token latency
<= the ITL SLO, as the Semi-PD and DistServe papers count it), over every arrival; rejected and
unfinished requests count as misses. Percentiles of TTFT and TPOT are exact; the token-level ITL
p99 comes from a fine log-spaced histogram (relative error < 1 %).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from semipd.api.v1alpha1 import KVCachePlacementStatus
from semipd.sim.fleet.requests import SimRequest

FINE_ITL_BOUNDS = tuple(1e-4 * 10 ** (k / 200) for k in range(1, 1201))
"""0.1 ms .. 100 s, 200 buckets per decade."""


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of unsorted values (NaN if empty)."""
    if not values:
        return math.nan
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(q * len(s)) - 1))
    return s[k]


def fine_quantile(counts: Sequence[int], q: float) -> float:
    total = sum(counts)
    if total == 0:
        return math.nan
    rank = q * total
    run = 0
    for i, c in enumerate(counts):
        run += c
        if run >= rank and c > 0:
            return FINE_ITL_BOUNDS[min(i, len(FINE_ITL_BOUNDS) - 1)]
    return FINE_ITL_BOUNDS[-1]


@dataclass(frozen=True)
class ActionRecord:
    time: float
    controller: str
    action: str
    """SetSplit | SetReplicas | SplitDone | Note actions from the controller (ScaleOut, SplitChange ...)."""
    target: str
    value: str
    reason: str = ""
    error: str = ""


@dataclass(frozen=True)
class KVPlacementRecord:
    """A change of the long-context pools the simulated operator published."""

    time: float
    long_context_pools: tuple[str, ...]
    reason: str
    long_weights: Mapping[str, int]
    short_weights: Mapping[str, int]
    message: str

    @classmethod
    def of(cls, time: float, status: KVCachePlacementStatus) -> KVPlacementRecord:
        return cls(
            time,
            tuple(status.long_context_pools),
            status.reason,
            {p.name: p.long_weight for p in status.pools},
            {p.name: p.short_weight for p in status.pools},
            status.message,
        )


KV_REJECTIONS = ("kv", "kv-wait")
"""Rejection reasons that are the KV cache's: could never fit, or waited past the bound."""


@dataclass(frozen=True)
class Sample:
    """Fleet state at one timeline instant (and what happened since the previous one)."""

    time: float
    arrival_rate: float
    finished: int
    attained: float | None
    """Fraction of requests finished since the previous sample that met both SLOs."""
    ttft_p99: float | None
    tpot_p99: float | None
    ttft_p50: float | None
    itl_p99_prom: float | None
    """Fleet p99 ITL as histogram_quantile over the engine buckets and the observation window."""
    replicas: Mapping[str, tuple[int, int, int]]
    """Pool -> (desired, existing, ready)."""
    splits: Mapping[str, tuple[int, int]]
    accelerators: int


@dataclass
class RunResult:
    name: str
    ttft_slo_s: float
    itl_slo_s: float
    arrivals: int
    finished: int
    rejected: Mapping[str, int]
    attainment: float
    ttft_attainment: float
    tpot_attainment: float
    ttft_p50: float
    ttft_p99: float
    tpot_p50: float
    tpot_p99: float
    itl_p99: float
    e2e_p50: float
    accelerator_hours: float
    cost: float
    duration_s: float
    last_arrival_s: float
    wall_s: float
    events: int
    actions: list[ActionRecord] = field(default_factory=list)
    timeline: list[Sample] = field(default_factory=list)
    pools: Mapping[str, Any] = field(default_factory=dict)
    """Per pool: accelerator-hours, peak replicas, replica-hours."""
    kv_placement: list[KVPlacementRecord] = field(default_factory=list)
    """Changes of the long-context pools (the first plan included)."""
    slo_attainment: float = math.nan
    """The product's SLO (scoring.py): TTFT within its SLO and every window the request decoded in
    had a token-level p99 ITL within the ITL SLO. `attainment` is the paper's (mean TPOT per request)."""
    itl_windows_met: float = math.nan
    """Share of scoring windows whose token-level p99 ITL met the ITL SLO."""
    lost: Mapping[str, int] = field(default_factory=dict)
    """Requests not served, by cause: restart, no ready replica, KV wait, rejected, unfinished."""

    @property
    def kv_rejections(self) -> int:
        return sum(self.rejected.get(k, 0) for k in KV_REJECTIONS)

    def summary(self) -> dict[str, Any]:
        keys = (
            "name", "arrivals", "finished", "slo_attainment", "itl_windows_met", "attainment", "ttft_attainment",
            "tpot_attainment", "ttft_p50",
            "ttft_p99", "tpot_p50", "tpot_p99", "itl_p99", "e2e_p50", "accelerator_hours", "cost", "duration_s",
            "last_arrival_s", "wall_s", "events",
        )  # fmt: skip
        out: dict[str, Any] = {k: _json_num(getattr(self, k)) for k in keys}
        out["rejected"] = dict(self.rejected)
        out["lost"] = dict(self.lost)
        out["slo"] = {"ttft_s": self.ttft_slo_s, "itl_s": self.itl_slo_s}
        out["pools"] = dict(self.pools)
        out["split_changes"] = sum(1 for a in self.actions if a.action == "SplitDone")
        out["replica_changes"] = sum(1 for a in self.actions if a.action == "SetReplicas" and not a.error)
        out["kv_rejections"] = self.kv_rejections
        out["kv_placement_changes"] = max(0, len(self.kv_placement) - 1)
        return out

    def to_json(self) -> dict[str, Any]:
        doc = self.summary()
        doc["actions"] = [a.__dict__ for a in self.actions]
        doc["kv_placement"] = [
            {**k.__dict__, "long_context_pools": list(k.long_context_pools), "long_weights": dict(k.long_weights),
             "short_weights": dict(k.short_weights)}
            for k in self.kv_placement
        ]  # fmt: skip
        doc["timeline"] = [
            {
                "t": s.time,
                "arrival_rate": s.arrival_rate,
                "finished": s.finished,
                "attained": s.attained,
                "ttft_p99": s.ttft_p99,
                "ttft_p50": s.ttft_p50,
                "tpot_p99": s.tpot_p99,
                "itl_p99_prom": s.itl_p99_prom,
                "replicas": {k: list(v) for k, v in s.replicas.items()},
                "splits": {k: list(v) for k, v in s.splits.items()},
                "accelerators": s.accelerators,
            }
            for s in self.timeline
        ]
        return doc


def _json_num(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def outcome_stats(requests: Sequence[SimRequest], ttft_slo: float, itl_slo: float) -> dict[str, Any]:
    """Attainment and exact percentiles over `requests` (all arrivals of a run)."""
    served = [r for r in requests if r.done and not r.rejected]
    n = len(requests)
    ttfts = [r.ttft for r in served]
    tpots = [r.tpot for r in served if r.output > 1]
    e2e = [r.finish - r.arrival for r in served]
    ok_t = sum(1 for r in served if r.ttft <= ttft_slo)
    ok_d = sum(1 for r in served if r.tpot <= itl_slo)
    ok = sum(1 for r in served if r.ttft <= ttft_slo and r.tpot <= itl_slo)
    rejected = Counter(r.rejected for r in requests if r.rejected)
    return {
        "arrivals": n,
        "finished": len(served),
        "rejected": dict(rejected),
        "attainment": ok / n if n else math.nan,
        "ttft_attainment": ok_t / n if n else math.nan,
        "tpot_attainment": ok_d / n if n else math.nan,
        "ttft_p50": percentile(ttfts, 0.5),
        "ttft_p99": percentile(ttfts, 0.99),
        "tpot_p50": percentile(tpots, 0.5),
        "tpot_p99": percentile(tpots, 0.99),
        "e2e_p50": percentile(e2e, 0.5),
    }


def fine_index(value: float) -> int:
    return bisect_left(FINE_ITL_BOUNDS, value)
