"""Semi-PD's controller as coded (infinigence/Semi-PD `distserve_base`, DynamicPartitioner.replan).

Per instance, once its window holds `window_requests` (400) finished requests: p90 TPOT (per
request: decode time / generated tokens) and the (ttft, prefill latency, waiting) tuple at the p90
index by TTFT; cond_tpot = 1.1 * p90_tpot <= TPOT_SLO, cond_ttft = p90_ttft <= TTFT_SLO. Both fail:
reset to (100, 100). One fails: move only that phase by 2-point steps (<= 3), predicting the effect
with the code's fitted scale curves; at 100 it lowers the other phase instead (floor 80), taking the
longest step whose prediction still meets the other SLO. The window is cleared after every replan.
The original checks after every decode iteration; here every `poll_s` (the window changes only
when a request finishes, so this delays an action by at most poll_s). Its TTFT window holds
prefilled requests; here finished ones (the same requests, a few seconds later).
"""

from __future__ import annotations

from collections.abc import Sequence

from semipd.sim.fleet.controller import Action, FleetView, Note, SetSplit
from semipd.sim.fleet.requests import SimRequest

INTERVAL = 2
MAX_STEP = 3
FLOOR = 80
TPOT_SCALE = 1.1


def scale_tpot(p: float) -> float:
    return 0.6099164272415375 * (100.0 / p) + 0.41530605763705736


def scale_latency(p: float) -> float:
    return 0.732435017003385 * (100.0 / p) + 0.3185253290850649


def scale_waiting(p: float) -> float:
    inv = 100.0 / p
    return 1.4046465674985547 * inv * inv - 3.15935463280878 * inv + 2.8734660485396604


def future_tpot(p_new: float, p_cur: float, p90_tpot: float) -> float:
    return scale_tpot(p_new) / scale_tpot(p_cur) * p90_tpot


def future_ttft(p_new: float, p_cur: float, p90_wait: float, p90_latency: float) -> float:
    return (
        scale_waiting(p_new) / scale_waiting(p_cur) * p90_wait
        + scale_latency(p_new) / scale_latency(p_cur) * p90_latency
    )


def replan(x: int, y: int, window: Sequence[SimRequest], ttft_slo: float, tpot_slo: float) -> tuple[int, int]:
    """One DynamicPartitioner.replan over a full window; the new (prefill, decode) SM percent."""
    tpots = sorted(r.tpot for r in window if r.output > 1)
    p90_tpot = tpots[int(0.9 * len(tpots))] if tpots else 0.0
    by_ttft = sorted(window, key=lambda r: r.ttft)
    at = by_ttft[int(0.9 * len(by_ttft))]
    p90_ttft, p90_latency = at.ttft, at.prefill_exec
    p90_wait = max(0.0, p90_ttft - p90_latency)
    cond_tpot = TPOT_SCALE * p90_tpot <= tpot_slo
    cond_ttft = p90_ttft <= ttft_slo
    if not cond_tpot and not cond_ttft:
        return (100, 100)  # "just maximize mfu"
    if cond_tpot and cond_ttft:
        return x, y
    if not cond_tpot:
        if y < 100:
            new_y = y
            for step in range(1, MAX_STEP + 1):
                new_y = min(100, y + INTERVAL * step)
                if future_tpot(new_y, y, p90_tpot) <= tpot_slo or new_y == 100:
                    break
            return x, new_y
        best_x = x
        for step in range(1, MAX_STEP + 1):
            cand = x - INTERVAL * step
            if cand < FLOOR:
                break
            if future_ttft(cand, x, p90_wait, p90_latency) <= ttft_slo:
                best_x = cand
        return best_x, y
    if x < 100:
        new_x = x
        for step in range(1, MAX_STEP + 1):
            new_x = min(100, x + INTERVAL * step)
            if future_ttft(new_x, x, p90_wait, p90_latency) <= ttft_slo or new_x == 100:
                break
        return new_x, y
    best_y = y
    for step in range(1, MAX_STEP + 1):
        cand = y - INTERVAL * step
        if cand < FLOOR:
            break
        if future_tpot(cand, y, p90_tpot) <= tpot_slo:
            best_y = cand
    return x, best_y


class SemiPDCodeController:
    def __init__(self, ttft_slo_s: float, tpot_slo_s: float, window_requests: int = 400, poll_s: float = 1.0,
                 name: str = "semipd-code") -> None:  # fmt: skip
        self.ttft_slo, self.tpot_slo = ttft_slo_s, tpot_slo_s
        self.window_requests = window_requests
        self.poll_s = poll_s
        self._name = name
        self._cursor: dict[str, int] = {}
        self._notes: list[Note] = []

    @property
    def name(self) -> str:
        return self._name

    @property
    def interval_s(self) -> float:
        return self.poll_s

    def control(self, view: FleetView) -> Sequence[Action]:
        actions: list[Action] = []
        for pool in view.pools().values():
            for inst in pool.ready():
                split = inst.split()
                if split is None or inst.switching:
                    continue
                start = self._cursor.setdefault(inst.name, len(inst.finished_log))
                if len(inst.finished_log) - start < self.window_requests:
                    continue
                window = inst.finished_log[start:]
                self._cursor[inst.name] = len(inst.finished_log)
                x, y = replan(split[0], split[1], window, self.ttft_slo, self.tpot_slo)
                if (x, y) != split:
                    actions.append(SetSplit(inst.name, x, y, "replan"))
                    self._notes.append(
                        Note(view.now, "SplitChange", "Replan", inst.pool, inst.name,
                             f"{split[0]}/{split[1]} -> {x}/{y} over {len(window)} requests")
                    )  # fmt: skip
        return actions

    def notes(self) -> Sequence[Note]:
        return self._notes
