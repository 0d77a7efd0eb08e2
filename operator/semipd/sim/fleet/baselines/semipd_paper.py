"""Semi-PD's SLO-aware dynamic partitioning as published (arXiv 2504.19867 §5, Alg. 1, Eq. 4).

Per instance, every `window_s`: take the pSLO-percentile TTFT and TPOT of the requests it finished
in the window (in-process, exact, as the engine-resident controller sees them); refit the Eq. 4
estimator TTFT(x') = a1 / (x' - lambda) + b1, TPOT(y') = a2 / y' + b2 on normalised shares
x' = x / (x + y), y' = y / (x + y); if exactly one SLO fails, step the failing phase's share up by
`step_size` (or, at 100, the other phase's down) until the estimate meets the SLO or `max_step`
steps were taken. Both pass or both fail: no change. The printed pseudo-code never increments
`step`; it is incremented here. The paper gives no step size, step count or window: we use the
Semi-PD code's 2 points x 3 steps, and a window of our SLO window.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from semipd.sim.fleet.controller import Action, FleetView, Note, SetSplit
from semipd.sim.fleet.requests import SimRequest
from semipd.sim.fleet.results import percentile

# Fig. 10 fits (Llama3-8B, ShareGPT) give the priors' shapes; their scale is refitted to each pod.
PRIOR_A1, PRIOR_B1 = 0.6809, 0.022
PRIOR_A2, PRIOR_B2 = 0.6284, 0.3818
HISTORY = 32
MIN_REQUESTS = 20
"""A window's percentile needs this many requests (our planner's threshold; the paper gives none)."""
SHARE_FLOOR = 10


def _least_squares(us: Sequence[float], ts: Sequence[float]) -> tuple[float, float] | None:
    """(a, b) minimising sum (a*u + b - t)^2; None if u has no spread."""
    n = len(us)
    mu = sum(us) / n
    mt = sum(ts) / n
    var = sum((u - mu) ** 2 for u in us)
    if var <= 1e-12:
        return None
    a = sum((u - mu) * (t - mt) for u, t in zip(us, ts, strict=True)) / var
    return a, mt - a * mu


@dataclass
class PaperEstimator:
    """Eq. 4 refitted online from (normalised share, latency) observations of one instance."""

    ttft_obs: list[tuple[float, float]] = field(default_factory=list)
    tpot_obs: list[tuple[float, float]] = field(default_factory=list)
    a1: float = PRIOR_A1
    b1: float = PRIOR_B1
    lam: float = 0.0
    a2: float = PRIOR_A2
    b2: float = PRIOR_B2

    def update(self, x: float, ttft: float, y: float, tpot: float) -> None:
        self.ttft_obs = [*self.ttft_obs, (x, ttft)][-HISTORY:]
        self.tpot_obs = [*self.tpot_obs, (y, tpot)][-HISTORY:]
        self._fit_tpot()
        self._fit_ttft()

    def _fit_tpot(self) -> None:
        ys = [y for y, _ in self.tpot_obs]
        ts = [t for _, t in self.tpot_obs]
        fit = _least_squares([1.0 / y for y in ys], ts) if len({round(y, 4) for y in ys}) >= 2 else None
        if fit is not None and fit[0] > 0:
            self.a2, self.b2 = fit
            return
        # One distinct share: keep Fig. 10's shape, scaled through the latest observation.
        y, t = self.tpot_obs[-1]
        k = t / (PRIOR_A2 / y + PRIOR_B2)
        self.a2, self.b2 = PRIOR_A2 * k, PRIOR_B2 * k

    def _fit_ttft(self) -> None:
        xs = [x for x, _ in self.ttft_obs]
        ts = [t for _, t in self.ttft_obs]
        best: tuple[float, float, float, float] | None = None
        if len({round(x, 4) for x in xs}) >= 3:
            top = min(xs)
            for step in range(40):
                lam = top * step / 40.0
                us = [1.0 / (x - lam) for x in xs]
                fit = _least_squares(us, ts)
                if fit is None or fit[0] <= 0:
                    continue
                sse = sum((fit[0] * u + fit[1] - t) ** 2 for u, t in zip(us, ts, strict=True))
                if best is None or sse < best[0]:
                    best = (sse, fit[0], fit[1], lam)
        if best is not None:
            self.a1, self.b1, self.lam = best[1], best[2], best[3]
            return
        x, t = self.ttft_obs[-1]
        k = t / (PRIOR_A1 / x + PRIOR_B1)
        self.a1, self.b1, self.lam = PRIOR_A1 * k, PRIOR_B1 * k, 0.0

    def ttft(self, x: float) -> float:
        return math.inf if x <= self.lam else self.a1 / (x - self.lam) + self.b1

    def tpot(self, y: float) -> float:
        return self.a2 / y + self.b2


def next_split(x0: int, y0: int, ttft: float, tpot: float, sp: float, sd: float, est: PaperEstimator,
               step_size: int, max_step: int) -> tuple[int, int]:  # fmt: skip
    """Alg. 1 after the estimator update: the new (x, y) in SM percent."""
    if (ttft <= sp) == (tpot <= sd):
        return x0, y0
    x, y, step = x0, y0, 0
    if ttft > sp:
        while step < max_step and est.ttft(x / (x + y)) > sp:
            if x + step_size <= 100:
                x += step_size
            elif y - step_size >= SHARE_FLOOR:
                y -= step_size
            else:
                break
            step += 1
    else:
        while step < max_step and est.tpot(y / (x + y)) > sd:
            if y + step_size <= 100:
                y += step_size
            elif x - step_size >= SHARE_FLOOR:
                x -= step_size
            else:
                break
            step += 1
    return x, y


class SemiPDPaperController:
    """Alg. 1 on every semi-PD instance of the fleet."""

    def __init__(self, ttft_slo_s: float, tpot_slo_s: float, window_s: float = 60.0, percentile_q: float = 0.9,
                 step_size: int = 2, max_step: int = 3, name: str = "semipd-paper") -> None:  # fmt: skip
        self.sp, self.sd = ttft_slo_s, tpot_slo_s
        self.window_s = window_s
        self.q = percentile_q
        self.step_size, self.max_step = step_size, max_step
        self._name = name
        self.estimators: dict[str, PaperEstimator] = {}
        self._cursor: dict[str, int] = {}
        self._notes: list[Note] = []

    @property
    def name(self) -> str:
        return self._name

    @property
    def interval_s(self) -> float:
        return self.window_s

    def _window(self, inst_name: str, log: list[SimRequest]) -> list[SimRequest]:
        start = self._cursor.get(inst_name, 0)
        self._cursor[inst_name] = len(log)
        return log[start:]

    def control(self, view: FleetView) -> Sequence[Action]:
        actions: list[Action] = []
        for pool in view.pools().values():
            for inst in pool.ready():
                split = inst.split()
                window = self._window(inst.name, inst.finished_log)
                if split is None or inst.switching or len(window) < MIN_REQUESTS:
                    continue
                ttft = percentile([r.ttft for r in window], self.q)
                tpots = [r.tpot for r in window if r.output > 1]
                tpot = percentile(tpots, self.q) if tpots else 0.0
                x0, y0 = split
                est = self.estimators.setdefault(inst.name, PaperEstimator())
                est.update(x0 / (x0 + y0), ttft, y0 / (x0 + y0), max(tpot, 1e-6))
                x, y = next_split(x0, y0, ttft, tpot, self.sp, self.sd, est, self.step_size, self.max_step)
                if (x, y) != (x0, y0):
                    why = "TTFTOverSLO" if ttft > self.sp else "TPOTOverSLO"
                    actions.append(SetSplit(inst.name, x, y, why))
                    self._notes.append(
                        Note(view.now, "SplitChange", why, inst.pool, inst.name,
                             f"{x0}/{y0} -> {x}/{y} (p{round(self.q * 100)} TTFT {ttft:.3g}s, TPOT {tpot:.3g}s)")
                    )  # fmt: skip
        return actions

    def notes(self) -> Sequence[Note]:
        return self._notes
