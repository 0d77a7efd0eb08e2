"""Scoring by the product's SLO: TTFT per request plus the token-level p99 ITL of each SLO window.

The operator sells "p99 TTFT and p99 ITL over `slo.window`" (the Prometheus histograms); the Semi-PD
paper scores each request's mean TPOT instead, which a policy with rare long stalls (chunked
prefill) passes while failing the product's SLO. Here a served request attains the SLO when its TTFT
is within the TTFT SLO and every window it decoded in (first token to finish) had a token-level p99
ITL within the ITL SLO. The per-window p99 comes from the run's fine ITL histogram, snapshotted at
each window boundary. Lost requests are counted by cause.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from semipd.sim.fleet.requests import SimRequest

SLO_WINDOW_S = 60.0
"""Scoring window (the examples' `slo.window` is 1-5 min; 60 s is the strictest of them)."""

LOST_CAUSES: Mapping[str, str] = {
    "restart": "restart",
    "no-replica": "no ready replica",
    "kv-wait": "KV wait",
    "kv": "rejected",
    "context": "rejected",
    "unfinished": "unfinished",
}
"""Rejection reason -> the cause reported (rejected: the engine answered 400, KV or context)."""


class ItlWindows:
    """Cumulative snapshots of the shared fine ITL histogram at every window boundary."""

    __slots__ = ("counts", "snapshots", "window_s")

    def __init__(self, counts: list[int], window_s: float = SLO_WINDOW_S) -> None:
        self.counts = counts
        self.window_s = window_s
        self.snapshots: list[list[int]] = []

    def snapshot(self) -> None:
        self.snapshots.append(list(self.counts))

    def p99s(self, bounds: Sequence[float]) -> list[float]:
        """Token-level p99 ITL of each window (NaN for a window without tokens)."""
        out = []
        for a, b in zip(self.snapshots, self.snapshots[1:], strict=False):
            out.append(_quantile([y - x for x, y in zip(a, b, strict=True)], 0.99, bounds))
        return out


def _quantile(counts: Sequence[int], q: float, bounds: Sequence[float]) -> float:
    total = sum(counts)
    if total == 0:
        return math.nan
    rank, run = q * total, 0
    for i, c in enumerate(counts):
        run += c
        if run >= rank and c > 0:
            return bounds[min(i, len(bounds) - 1)]
    return bounds[-1]


class SloScore(NamedTuple):
    slo_attainment: float
    itl_windows_met: float
    lost: dict[str, int]
    windows: list[tuple[int, int, int]]
    """Per arrival window: (arrivals, product-SLO attained, paper attained), for per-window oracles."""


def slo_score(
    requests: Sequence[SimRequest], ttft_slo: float, itl_slo: float, window_p99: Sequence[float], window_s: float
) -> SloScore:
    """Product-SLO attainment, the share of windows meeting the ITL SLO, and lost requests by cause."""
    bad = [not math.isnan(p) and p > itl_slo for p in window_p99]
    # prefix sums of failing windows: "any failing window in [i, j]" in O(1)
    prefix = [0]
    for b in bad:
        prefix.append(prefix[-1] + b)
    last = len(bad) - 1
    ok = 0
    windows: list[list[int]] = []
    for r in requests:
        w = int(r.arrival // window_s)
        while len(windows) <= w:
            windows.append([0, 0, 0])
        windows[w][0] += 1
        if r.rejected or not r.done or r.ttft > ttft_slo:
            continue
        if r.tpot <= itl_slo:
            windows[w][2] += 1
        if r.output > 1 and last >= 0:
            i = min(last, int(r.first_token // window_s))
            j = min(last, int(r.finish // window_s))
            if prefix[j + 1] - prefix[i]:
                continue
        ok += 1
        windows[w][1] += 1
    n = len(requests)
    measured = [p for p in window_p99 if not math.isnan(p)]
    lost = Counter(LOST_CAUSES.get(r.rejected, r.rejected) for r in requests if r.rejected)
    return SloScore(
        ok / n if n else math.nan,
        (sum(1 for p in measured if p <= itl_slo) / len(measured)) if measured else math.nan,
        dict(lost),
        [(a, b, c) for a, b, c in windows],
    )
