"""One plan() call's inputs and scratch space, and the small readings of an observation that the
split and replica planners share (a pod's fitting sample, SLO headroom, settling, the grid of splits the
spec allows)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from semipd.api.v1alpha1 import AutoscalingMode, InferencePoolSpec
from semipd.perf import LatencyModel, contended_shares
from semipd.policy.estimator import Sample
from semipd.policy.evidence import ItlReading
from semipd.policy.observation import Observation, PodObservation
from semipd.policy.state import ControllerState, Decision

CAPACITY_MARGIN = 0.10
"""Headroom (fraction of each SLO) the replica controller provisions for."""
MIN_WINDOW_REQUESTS = 20.0
"""Finished requests a pod's window must hold before its p99s drive a split move or a fit (a p99 of a
handful of requests is noise; Semi-PD's own controller waits for 400)."""
LOAD_STEP = 1.5
"""A pod whose finished-request rate over the recent window is this many times its whole window's has
just taken a load step: the window's p99 TTFT already shows the new load while its rate still averages
in the old. Fitted, such a window inflates the TTFT amplitude until the curves credit the pool no
capacity at all (an e2e step from idle to 6 req/s read about 2 req/s at p99 TTFT 2-3 s and scaled out
into the other pool although the split alone fixed it). Under steady load the recent rate crosses 1.5x
the window's only by chance; such a window is merely left out of the fit (estimate)."""


@dataclass(frozen=True)
class PoolContext:
    """What the planner needs to know about one node pool beyond the spec."""

    model: LatencyModel
    split_supported: bool
    split_cost_s: float
    """Seconds one split change takes (standby swap or restart): the cooldown's floor."""
    restart: bool = False
    """A split change relaunches the engine (the pod drains, then serves nothing until it is back)."""
    itl_buckets: tuple[float, ...] = ()
    """The engine's ITL histogram bucket edges (s): how finely a measured p99 ITL resolves near the SLO."""

    def margin_line(self, slo: float, margin: float) -> float:
        """The measured p99 ITL at or below which a window has `margin` of the SLO free: (1 - margin) x SLO,
        or the SLO itself where the engine's bucket holding that line starts more than twice the margin
        below the SLO and reaches it (vLLM's and MindIE's 25-50 ms for a 50 ms SLO). A p99 interpolated
        inside so wide a bucket says how much of the window fell in it, not how near the SLO its tail
        is: on mix-shift 6/s the pool's true p99 was 30-35 ms while every pod read 47-50 ms, and the ITL
        defence took their prefill share (fair judge, vLLM's layout, tight ITL: 52.2 % vs 88.2 %). A line
        below the smallest edge or above the largest, or unknown edges, keep (1 - margin) x SLO."""
        line = slo * (1.0 - margin)
        lower = max((b for b in self.itl_buckets if b < line), default=None)
        upper = min((b for b in self.itl_buckets if b >= line), default=None)
        if lower is None or upper is None or upper < slo - 1e-12:
            return line
        return slo if lower < slo * (1.0 - 2.0 * margin) - 1e-12 else line


@dataclass(frozen=True)
class Hold:
    """Why the split planner kept a pod that misses an SLO at its split (policy.explain reports it)."""

    reason: str
    """CamelCase, one of policy.explain.HOLD_TEXT."""
    details: Mapping[str, str]


def fmt(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.4g}"


def headroom(ttft: float | None, itl: float | None, s_ttft: float, s_itl: float) -> float | None:
    if ttft is None or itl is None:
        return None
    return min((s_ttft - ttft) / s_ttft, (s_itl - itl) / s_itl)


def sample_of(pod: PodObservation, window_s: float) -> Sample | None:
    """The pod's window as a fitting sample; None when it is not Ready, idle or unknown."""
    if (
        not pod.ready
        or pod.ttft_p99 is None
        or pod.request_rate is None
        or pod.request_rate * window_s < MIN_WINDOW_REQUESTS
        or pod.prefill_percent is None
        or pod.decode_percent is None
    ):
        return None
    x, y = contended_shares(pod.prefill_percent / 100.0, pod.decode_percent / 100.0)
    split = (pod.prefill_percent, pod.decode_percent)
    return Sample(x, y, pod.request_rate, pod.ttft_p99, pod.itl_p99, pod.running, pod.queued, split)


def load_rising(pod: PodObservation) -> bool:
    """The pod's window mixes an older, lighter load with the one it serves now (see LOAD_STEP)."""
    recent, whole = pod.request_rate_recent, pod.request_rate
    return recent is not None and whole is not None and recent > LOAD_STEP * whole


def split_allowed(spec: InferencePoolSpec, ctx: PoolContext) -> bool:
    moves_splits = spec.autoscaling.mode in (AutoscalingMode.SEMIPD, AutoscalingMode.EXTERNAL)
    return moves_splits and spec.semi_pd.enabled and ctx.split_supported


@dataclass
class Run:
    """Mutable scratch space of one plan() call (never escapes it)."""

    spec: InferencePoolSpec
    obs: Observation
    state: ControllerState
    pools: Mapping[str, PoolContext]
    replicas: dict[str, int]
    decisions: list[Decision]
    ttft_slo: float
    itl_slo: float
    window_s: float
    interval_s: float
    fix_expected: dict[str, float]
    """Pod -> time of a split change predicted to clear its violation (scale-out waits while it settles)."""
    rates: dict[str, float]
    """Node pool -> finished requests/s per Ready replica now (pools without data are absent)."""
    restarted: dict[str, float]
    """Node pool -> time of its last restart-mode split change."""
    first_seen: dict[str, float]
    """Pod -> when it first showed up Ready (pods of this observation only)."""
    evidence: dict[str, tuple[ItlReading, ...]] = field(default_factory=dict)
    """Node pool -> ITL readings, this observation's included (filled by the split planner)."""
    canary: dict[str, float] = field(default_factory=dict)
    """Node pool -> time of its last canary split change (the state's, updated)."""
    holds: dict[str, Hold] = field(default_factory=dict)
    """Pod -> why the split planner kept it at its split while it misses an SLO (this evaluation)."""
    held: dict[str, tuple[str, float]] = field(default_factory=dict)
    """Pod -> (reason, time) of the last hold reported for it (the state's, updated)."""

    @property
    def now(self) -> float:
        return self.obs.time

    def decide(
        self,
        action: str,
        reason: str,
        message: str,
        node_pool: str | None = None,
        pod: str | None = None,
        **details: float | int | str,
    ) -> None:
        self.decisions.append(
            Decision(self.now, action, reason, node_pool, pod, message, {k: str(v) for k, v in details.items()})
        )

    def settling(self, pod: str) -> bool:
        """The pod's split changed, or the pod appeared, within the last observation window: its p99s
        still mix both splits (or start-up, where finished requests lag arrivals)."""
        return self.starting(pod) or self.now - self.state.last_split_change.get(pod, -math.inf) < self.window_s

    def starting(self, pod: str) -> bool:
        """The pod appeared within the last observation window (finished requests still lag arrivals)."""
        return self.now - self.first_seen.get(pod, self.now) < self.window_s

    def awaiting_fix(self, pod: str) -> bool:
        """The pod's last split change, within the last window, was predicted to clear its SLO miss."""
        return self.now - self.fix_expected.get(pod, -math.inf) < self.window_s


def grid(spec_bounds: tuple[int, int, int, int], step: int, around: tuple[int, int]) -> list[tuple[int, int]]:
    """(prefill, decode) pairs on the spec's grid (bounds, the step between points, and the pod's
    current split), the current split first, then closest first (ties keep the split that moves least)."""
    x_lo, x_hi, y_lo, y_hi = spec_bounds
    xs = sorted({*range(x_lo, x_hi + 1, step), x_hi, *([around[0]] if x_lo <= around[0] <= x_hi else [])})
    ys = sorted({*range(y_lo, y_hi + 1, step), y_hi, *([around[1]] if y_lo <= around[1] <= y_hi else [])})
    pairs = [(x, y) for x in xs for y in ys]
    pairs.sort(key=lambda p: (abs(p[0] - around[0]) + abs(p[1] - around[1]), p))
    return pairs


def bounds(run: Run) -> tuple[int, int, int, int]:
    sp = run.spec.semi_pd
    return sp.min_prefill_percent, sp.max_prefill_percent, sp.min_decode_percent, sp.max_decode_percent
