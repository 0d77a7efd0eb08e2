"""ITL evidence: what a node pool's pods have measured at each decode share, so the split planner
never trusts its model far below a share that was seen to meet ITL, and never goes back to a share
that was seen to break it at a lower arrival rate.

The fitted ITL curve is interpolated between observed shares and flat below the smallest one; the
contention that makes ITL grow as decode's share shrinks is exactly what is least known there
(docs/latency-model.md). Readings are per pod and pooled per node pool: one pod's miss keeps the
others from repeating it. Decode comes down one grid step at a time below what was measured to
work (the fair judge's world has a cliff between decode 40 % and 30 % that the prior does not
see), one pod per node pool at a time (a canary; the others follow once its window met ITL);
everything else still jumps. Readings expire, because the request mix moves (long documents contend more
than chat at the same request rate), and a clean reading is dropped as soon as a window no older ran
tight or broke with at least as much decode share. A window that just ran tight or broke at a decode
share refuses that share and less whatever the prefill share (CAP_TTL_WINDOWS).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from semipd.perf import contended_shares

TTL_WINDOWS = 10.0
"""Readings that met ITL are forgotten after this many SLO windows (the mix they were measured on moved)."""
BROKEN_TTL_WINDOWS = 60.0
"""Readings that broke ITL are kept longer: one more breach costs every request decoded in that window
across the pool's p99, which no TTFT gain from a little more prefill share repays. The refusal is
scoped to half the breach's rate and up (BROKEN_RATE_FRACTION), so the night is free anyway; at 30
windows the azure-conv day (TTFT 2 s, peak 12/s) broke the same decode-30 % cliff twice, 56 minutes
apart (97.7 % vs 98.6 %)."""
BROKEN_RATE_FRACTION = 0.5
"""A breach at rate r refuses its share and less down to this fraction of r: ITL under contention is
set more by the step than by the batch (the fair judge's world broke 50 ms at (100, 40) at 1.5/s as
at 4/s), yet a breach at a peak must not pin the split through the night (estimate)."""
CAP_TTL_WINDOWS = 3.0
"""For this many SLO windows a reading that ran ITL tight or broke it refuses its decode share (alone) and
less at any prefill share, not only splits with no more contended decode share. The prior's coupling
normalises the two caps (x / (x + y)), so (90, 60) looks like (100, 70), which ran clean, more than like
(100, 60), which ran tight; the fair judge's world slows decode far less with prefill share (39 ms at
(100, 40), (90, 40) and (80, 40) alike on azure-conv 24/s). Without it, pods the ITL defence had just
raised to (100, 70) came back to (90, 60) for TTFT while peers ran (100, 60) tight, and the pool broke
ITL (mix-shift 5/s, tight ITL, decode x1.3: 84.1 % vs 94.3 %). Kept for every reading's TTL (10
windows), it also held the azure-conv day off decode 40 % long after a tight window there (read inside
SGLang's 40-50 ms bucket) and cost GPU-hours: the day criterion held in 21 of 24 cases, against 23
without the rule and 24 at 3 windows (probe; estimate)."""
CLEAN_RATE_REACH = 1.25
"""A clean reading at rate r vouches for its decode share up to this multiple of r (estimate)."""
MAX_READINGS = 256
"""Per node pool, newest kept (after merging repeats of one verdict: a breach must not be pushed out
by the clean windows of the other pods)."""
EPS = 1e-9


@dataclass(frozen=True)
class ItlReading:
    """One settled pod window's verdict on ITL at its split."""

    time: float
    share: float
    """Contended decode share of the split the pod ran (0-1]."""
    rate: float
    """Per-pod finished requests/s in the window."""
    decode_percent: int
    """The decode share (alone) of that split."""
    clean: bool
    """True: p99 ITL had the measured margin free; False: p99 ITL was over the SLO (or, with `tight`,
    within the margin of it)."""
    tight: bool = False
    """p99 ITL was within the measured margin of the SLO, not over it: the share is refused at this
    rate or more (not down to BROKEN_RATE_FRACTION of it), and forgotten like a clean reading."""


def decode_share(split: tuple[int, int]) -> float:
    """Decode's share while prefill runs (what sets the token-level p99 ITL)."""
    return round(contended_shares(split[0] / 100.0, split[1] / 100.0)[1], 6)


def less_decode(split: tuple[int, int], than: tuple[int, int]) -> bool:
    """`split` gives decode less share than `than` does, while prefill runs or alone."""
    contended = [contended_shares(x / 100.0, y / 100.0)[1] for x, y in (split, than)]
    return contended[0] < contended[1] - EPS or split[1] < than[1]


def updated(
    readings: Iterable[ItlReading], new: Iterable[ItlReading], now: float, window_s: float
) -> tuple[ItlReading, ...]:
    """The pool's readings with this evaluation's added and the expired ones dropped.

    Repeats of one verdict at one split merge into the newest (its time: the verdict lasts while it
    repeats). A merged breach or tight window keeps the lowest rate any of them refused from: the
    newest alone may have run at a higher rate, and a pod just below it would take the share that ran
    tight at its own rate a window ago (mix-shift 5/s, tight ITL, decode x1.3: a pod came down from
    (100, 70) to (90, 50) while its peers read decode 50 tight at lower rates, and the pool broke
    ITL)."""
    newest: dict[tuple[float, int, bool, bool, float], ItlReading] = {}
    for r in (*readings, *new):
        if now - r.time < (TTL_WINDOWS if r.clean or r.tight else BROKEN_TTL_WINDOWS) * window_s:
            key = (r.share, r.decode_percent, r.clean, r.tight, 0.0 if not r.clean else round(r.rate, 1))
            repeat = newest.get(key)
            if repeat is not None and not r.clean and repeat.rate < r.rate:
                r = replace(r, rate=repeat.rate)
            newest[key] = r
    kept = sorted(newest.values(), key=lambda r: r.time)
    return tuple(kept[-MAX_READINGS:])


@dataclass(frozen=True)
class Verdicts:
    """What a node pool's readings say to one pod: built once per pod, asked once per candidate."""

    lowest_decode: int
    """The smallest decode share measured to meet ITL at the pod's rate or more (its own split's
    counts: a pod that broke ITL moves up anyway)."""
    breaches: tuple[tuple[float, float], ...]
    """(contended decode share, lowest per-pod rate it refuses) of every reading that broke ITL or ran
    it tight."""
    step: int
    """How far below the smallest clean decode share a candidate may go (percent): one grid step, two
    for a roomy pod."""
    current_decode: int
    """The pod's own decode share (alone): a recent cap is refused only to a pod coming down to it."""
    recent_caps: tuple[tuple[int, float], ...]
    """(decode share alone, lowest per-pod rate it refuses) of the breaches within CAP_TTL_WINDOWS."""
    clean_share: float = 1.0
    """The smallest contended decode share (decode's share while prefill runs) measured to meet ITL at
    the pod's rate or more: a split with at least this much was run clean, whatever the prior says."""

    def refusal(self, split: tuple[int, int], rate: float) -> str:
        """Why `split` may not be chosen at `rate` (projected, margins included); "" if it may.

        - broken: a split with at least this contended decode share broke ITL at a rate of at most
          1 / BROKEN_RATE_FRACTION times this one (or ran it tight at no more than this rate), or, for
          a pod coming down in decode share, one with at least this much alone did so in the last
          CAP_TTL_WINDOWS (a pod breaking ITL keeps the lever of less prefill at its own cap);
        - untrusted: its decode share is more than one grid step below `lowest_decode` (below it the
          model extrapolates: the fair judge's world broke 50 ms at (100, 40) and (80, 30) where the
          prior promised 44 ms).
        """
        share = decode_share(split)
        if any(b >= share - EPS and rate >= r for b, r in self.breaches):
            return "broken"
        if split[1] < self.current_decode and any(split[1] <= cap and rate >= r for cap, r in self.recent_caps):
            return "broken"
        if split[1] < self.lowest_decode - self.step:
            return "untrusted"
        return ""

    def vouched(self, split: tuple[int, int]) -> bool:
        """A pod at the pod's rate or more met ITL with no more decode share than `split` gives it, both
        while prefill runs and alone: the measurement, not the prior's coupling, prices its ITL."""
        return decode_share(split) >= self.clean_share - EPS and not self.explores(split)

    def explores(self, split: tuple[int, int]) -> bool:
        """The split's decode share is below every one measured to meet ITL at this rate: a canary,
        which goes one pod per node pool at a time. (More prefill at a measured decode share is not
        one: TTFT fixes for many pods must not queue behind each other.)"""
        return split[1] < self.lowest_decode


ROOMY_ITL = 0.6
"""A pod whose own measured p99 ITL is at most this fraction of the SLO may go two grid steps below
the smallest decode share measured clean, not one: far from the SLO, one step per window is what
made a start at decode 100 % take six minutes to reach 50 % (estimate)."""


def verdicts(readings: Iterable[ItlReading], measured_rate: float, current: tuple[int, int], step: int, *,
             now: float, window_s: float, roomy: bool = False) -> Verdicts:  # fmt: skip
    """The readings as seen at time `now` by a pod at `current` serving `measured_rate` per-pod
    arrivals/s; `roomy`: its own p99 ITL is at most ROOMY_ITL of the SLO."""
    pool = tuple(readings)
    against = [r for r in pool if not r.clean]
    # A clean reading is stale once a window of the same or a later evaluation ran ITL tight or broke it
    # with at least as much decode share: the mix moved under it (readings are not scoped by mix). With
    # later only, a pod at (100, 70) followed a peer's clean window at (90, 60) while two other pods ran
    # (90, 60) tight in that evaluation, and broke ITL (mix-shift 5/s, tight ITL, decode x1.3, seed 0).
    met = [r for r in pool if r.clean and CLEAN_RATE_REACH * r.rate >= measured_rate - EPS
           and not any(b.time >= r.time and b.share >= r.share - EPS for b in against)]  # fmt: skip
    refused = [(r, r.rate * (1.0 if r.tight else BROKEN_RATE_FRACTION)) for r in against]
    recent = [(r.decode_percent, rate) for r, rate in refused if now - r.time <= CAP_TTL_WINDOWS * window_s + EPS]
    return Verdicts(
        lowest_decode=min([current[1], *(r.decode_percent for r in met)]),
        breaches=tuple((r.share, rate) for r, rate in refused),
        step=step * (2 if roomy else 1),
        current_decode=current[1],
        recent_caps=tuple(recent),
        clean_share=min([1.0, *(r.share for r in met)]),
    )
