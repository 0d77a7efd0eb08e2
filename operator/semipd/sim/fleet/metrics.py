"""Per-instance engine metrics as Prometheus would store them, and PromQL's histogram_quantile.

Each instance keeps cumulative counters (histogram buckets with the engine's own bucket edges,
finished requests, prompt/generation tokens) like the engine's /metrics. The simulated Prometheus
scrapes them every scrape interval; window queries take the increase between the first and last
scrape inside the window, as `rate(x[w])` does (without Prometheus' boundary extrapolation, which
cancels in histogram_quantile's ratios and only rescales rates by at most one scrape interval).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass


def histogram_quantile(q: float, bounds: Sequence[float], counts: Sequence[float]) -> float:
    """PromQL histogram_quantile over non-cumulative `counts` (len(bounds) + 1, the last is +Inf).

    Linear interpolation inside the bucket holding rank q * total; the lowest bucket starts at 0;
    a rank in the +Inf bucket returns the highest finite bound; no observations give NaN.
    """
    total = 0.0
    for c in counts:
        total += c
    if total <= 0:
        return math.nan
    rank = q * total
    below = 0.0
    for i, c in enumerate(counts):
        if below + c >= rank and c > 0:
            if i == len(bounds):
                return bounds[-1]
            start = 0.0 if i == 0 else bounds[i - 1]
            return start + (bounds[i] - start) * ((rank - below) / c)
        below += c
    return bounds[-1]


class Histogram:
    """Cumulative bucket counts; `observe_many` records n equal observations in O(log buckets)."""

    __slots__ = ("bounds", "counts")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1

    def observe_many(self, value: float, n: int) -> None:
        self.counts[bisect_left(self.bounds, value)] += n


class EngineCounters:
    """What one engine pod exports (the series the operator's PromQL reads).

    `fine_itl`, shared by all instances of a run, records every inter-token gap again in fine
    buckets for the run's exact-enough ITL percentiles (the engine's buckets are coarse).
    """

    __slots__ = ("_fine", "finished", "generation_tokens", "itl", "prompt_tokens", "ttft")

    def __init__(self, ttft_bounds: Sequence[float], itl_bounds: Sequence[float], fine_itl: Histogram) -> None:
        self.ttft = Histogram(ttft_bounds)
        self.itl = Histogram(itl_bounds)
        self._fine = fine_itl
        self.finished = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0

    def observe_itl(self, value: float) -> None:
        self.itl.counts[bisect_left(self.itl.bounds, value)] += 1
        self._fine.counts[bisect_left(self._fine.bounds, value)] += 1

    def observe_itl_many(self, value: float, n: int) -> None:
        self.itl.counts[bisect_left(self.itl.bounds, value)] += n
        self._fine.counts[bisect_left(self._fine.bounds, value)] += n

    def snapshot(self) -> Snapshot:
        return Snapshot(
            tuple(self.ttft.counts), tuple(self.itl.counts), self.finished, self.prompt_tokens, self.generation_tokens
        )


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Cumulative values at one scrape."""

    ttft: tuple[int, ...]
    itl: tuple[int, ...]
    finished: int
    prompt_tokens: int
    generation_tokens: int


@dataclass(frozen=True, slots=True)
class Gauges:
    """Instantaneous gauges at one scrape."""

    running: int
    queued: int
    kv_usage: float


@dataclass(frozen=True, slots=True)
class WindowDelta:
    """Increase of every counter over a window and the seconds it covers."""

    seconds: float
    ttft: tuple[int, ...]
    itl: tuple[int, ...]
    finished: int
    prompt_tokens: int
    generation_tokens: int

    def rate(self, value: float) -> float:
        return value / self.seconds if self.seconds > 0 else 0.0


class ScrapeSeries:
    """One pod's scraped samples (bounded to what the longest window needs)."""

    __slots__ = ("_keep", "gauges", "samples")

    def __init__(self, keep_s: float) -> None:
        self.samples: deque[tuple[float, Snapshot]] = deque()
        self.gauges: Gauges | None = None
        self._keep = keep_s

    def scrape(self, now: float, snap: Snapshot, gauges: Gauges) -> None:
        self.samples.append((now, snap))
        self.gauges = gauges
        while len(self.samples) > 2 and self.samples[1][0] <= now - self._keep:
            self.samples.popleft()

    def window(self, now: float, window_s: float) -> WindowDelta | None:
        """Increase between the first and the last sample within (now - window, now]; None with < 2."""
        # Left-open range (now - window, now], as Prometheus 3 selects samples.
        inside = [(t, s) for t, s in self.samples if now - window_s + 1e-9 < t <= now + 1e-9]
        if len(inside) < 2:
            return None
        (t0, a), (t1, b) = inside[0], inside[-1]
        return WindowDelta(
            t1 - t0,
            tuple(y - x for x, y in zip(a.ttft, b.ttft, strict=True)),
            tuple(y - x for x, y in zip(a.itl, b.itl, strict=True)),
            b.finished - a.finished,
            b.prompt_tokens - a.prompt_tokens,
            b.generation_tokens - a.generation_tokens,
        )

    @property
    def last_time(self) -> float:
        return self.samples[-1][0] if self.samples else -math.inf


def sum_counts(parts: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    """Bucket-wise sum (`sum by (le)` over pods)."""
    if not parts:
        return ()
    return tuple(sum(col) for col in zip(*parts, strict=True))
