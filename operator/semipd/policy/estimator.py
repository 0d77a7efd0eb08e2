"""Latency curves of one node pool's replicas, fitted online, used to predict the effect of a split
or replica change before making it.

Form (Semi-PD §5, Eq. 4, extended): TTFT_p99(x, r) = a1 / (x' - r * l100) + b1 and
ITL_p99(x, y, r) = c * step(batch(r), share), where x', y' are the *effective* prefill/decode shares
under MPS contention (`contended_shares`), r the per-replica arrival rate, l100 the prefill time of
a mean prompt at full share, and step() the roofline decode-step time of the latency model. The
decode step runs at the contended share y' only while a prefill batch runs (a fraction
rho = r * l100 / x' of the time) and at its own cap y otherwise; the token-level p99 is the
contended step once more than 1 % of the tokens are generated under contention. The model gives
the structure and priors; observations fit a1, l100 and c, so a wrong hardware profile is
corrected by what Prometheus actually shows. The speeds follow the latency model's contention form:
take turns (x' and y' as above, the shipped prior) or share curves (the co-run speeds, where x' is
prefill's speed relative to the whole device), so a calibrated contention file can be the prior.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from semipd.perf import LatencyModel, contended_shares

P99_FACTOR = 2.0
"""Prior p99 / mean prefill time before any observation (prompt-length spread; near-deterministic service
makes M/M/1's ln(100) far too pessimistic at low load). Observations replace it."""
DEFAULT_PROMPT_TOKENS = 1024.0
DEFAULT_OUTPUT_TOKENS = 256.0
MAX_SAMPLES = 24
SATURATED_S = 1e6
"""Stand-in TTFT for a saturated replica (arrivals faster than prefill can serve)."""
ITL_QUANTILE = 0.99
"""The ITL SLO is a token-level p99: contended steps set it once more than 1 % of tokens see them."""
_L100_GRID = tuple(2.0 ** (k / 4.0) for k in range(-8, 9))  # 0.25x .. 4x of the prior
L100_TOLERANCE = 0.01
"""A fitted l100 scale leaves the prior only for a fit better by more than this mean squared relative
TTFT error (a 10 % RMS). Unregularised, on the azure-conv day (TTFT SLO 2 s) the scale swung between
0.25x and 2.4x from one evaluation to the next and the SLO capacity per replica between 0.2 and
13 req/s, and scale-in followed the optimistic end (estimate)."""

BURST_UTILIZATION = 0.7
"""A replica's SLO capacity is at most this fraction of its saturation rate (prefill share / l100), whatever
the TTFT SLO allows: arrivals swing +-50 % minute to minute (Azure's conversation trace; the planner's
BURSTS), a queue run hotter saturates in a burst, and a new replica serves only after its start-up time.
A loose TTFT SLO puts the SLO capacity near the pole: on the azure-conv day at TTFT 3 s the pods ran at
85-90 % of saturation and a burst cost two minutes' TTFT before the scale-out served (peak 16: 731
requests). Day sweep (peaks 11-16 x TTFT 1-3 s), meeting 99 %: 17 of 24 uncapped; 16 at 0.8, 20 at 0.75,
21 at 0.7, 22 at 0.6, which costs more GPU-hours than replica-only scaling at TTFT 2 s. TTFT 1 s and 1.5 s
unchanged: there the SLO binds first (estimate)."""


@dataclass(frozen=True)
class Sample:
    """One pod-level observation usable for fitting."""

    prefill_share: float
    """Effective prefill share (0-1]."""
    decode_share: float
    rate: float
    """Per-replica arrivals/s."""
    ttft: float
    itl: float | None
    batch: float | None
    queued: float | None = None
    """Requests waiting for prefill at the end of the window."""
    split: tuple[int, int] | None = None
    """The configured (prefill, decode) percentages the pod ran."""

    @property
    def saturated(self) -> bool:
        """More than a second of arrivals is waiting: the TTFT is backlog, not the service curve."""
        return self.queued is not None and backlogged(self.queued, self.rate)


def backlogged(queued: float, rate: float) -> bool:
    """More than a second of arrivals (at `rate` per second) waits: the server does not keep up now."""
    return queued > max(1.0, rate)


@dataclass(frozen=True)
class Fit:
    """Fitted parameters of one node pool (part of the controller state; replaced, never mutated)."""

    prompt_tokens: float = DEFAULT_PROMPT_TOKENS
    output_tokens: float = DEFAULT_OUTPUT_TOKENS
    l100_scale: float = 1.0
    """Fitted l100 / model l100."""
    a1: float | None = None
    """Fitted TTFT amplitude (seconds x share); None until observed."""
    itl_scale: float = 1.0
    """Observed / modelled ITL (median of recent windows): the scale where no share was observed."""
    itl_by_share: tuple[tuple[float, float], ...] = ()
    """(contended decode share, observed / modelled ITL) per share observed, ascending: the roofline's
    error grows as decode's share shrinks, so one scale fitted at a large share would promise too much
    at a small one. Interpolated between shares, flat beyond them."""
    samples: tuple[Sample, ...] = ()

    def observe(self, sample: Sample, prompt_tokens: float | None, output_tokens: float | None) -> Fit:
        """Add one observation (bounded history) and update the mean request shape."""
        fit = replace(self, samples=(*self.samples, sample)[-MAX_SAMPLES:])
        if prompt_tokens is not None and prompt_tokens > 0:
            fit = replace(fit, prompt_tokens=prompt_tokens)
        if output_tokens is not None and output_tokens > 0:
            fit = replace(fit, output_tokens=output_tokens)
        return fit


@dataclass(frozen=True)
class Estimator:
    """Predictions for one node pool from its latency model and fit."""

    model: LatencyModel
    fit: Fit

    # --- building blocks ---------------------------------------------------------------------------

    def l100(self) -> float:
        """Seconds to prefill one mean prompt at full share (fitted)."""
        base = self.model.prefill_time([max(1, round(self.fit.prompt_tokens))], 1.0)
        return base * self.fit.l100_scale

    def a1(self) -> float:
        return self.fit.a1 if self.fit.a1 is not None else P99_FACTOR * self.l100()

    def _step(self, batch: float, decode_share: float, prefill_running: bool = True) -> float:
        b = max(1, round(batch))
        context = self.fit.prompt_tokens + self.fit.output_tokens / 2.0
        share = min(1.0, max(decode_share, 0.01))
        return self.model.decode_step_time(b, int(b * context), share, prefill_running=prefill_running)

    def prefill_speed(self, prefill_pct: int, decode_pct: int) -> float:
        """Prefill's speed at a split while decode runs beside it, relative to prefill alone on the whole
        device: the contended share x' under take turns, the share curves' co-run speed otherwise."""
        x, y = prefill_pct / 100.0, decode_pct / 100.0
        if self.model.contention.take_turns:
            return contended_shares(x, y)[0]
        return self.model.corun_speeds(min(1.0, x), min(1.0, y))[0]

    def _sample_speed(self, sample: Sample) -> float:
        return self.prefill_speed(*sample.split) if sample.split is not None else sample.prefill_share

    def _split_step(self, batch: float, prefill_pct: int, decode_pct: int, under_prefill: bool) -> float:
        """The decode step at a split, with a prefill batch running beside it or not."""
        x, y = prefill_pct / 100.0, min(1.0, decode_pct / 100.0)
        if self.model.contention.take_turns:
            return self._step(batch, contended_shares(x, y)[1] if under_prefill else y, under_prefill)
        b = max(1, round(batch))
        context = self.fit.prompt_tokens + self.fit.output_tokens / 2.0
        return self.model.decode_batch_time(b, int(b * context), y, min(1.0, x) if under_prefill else None)

    def _little(self, rate: float, step: Callable[[float], float]) -> float:
        """Steady-state decode batch by Little's law: arrivals x tokens x step(batch) (fixed point)."""
        batch = 1.0
        for _ in range(6):
            batch = max(1.0, rate * self.fit.output_tokens * step(batch))
        return batch

    # --- predictions --------------------------------------------------------------------------------

    def ttft(self, prefill_pct: int, decode_pct: int, rate: float) -> float:
        """Predicted p99 TTFT (s) at split (prefill_pct, decode_pct) and per-replica arrival rate."""
        room = self.prefill_speed(prefill_pct, decode_pct) - rate * self.l100()
        if room <= 0:
            # Saturated: the queue grows without bound. Stay finite and monotone so that more prefill
            # share still ranks as less bad (the controller must know which way to move).
            return SATURATED_S * (1.0 - room)
        return self.a1() / room

    def batch(self, decode_share: float, rate: float) -> float:
        """Steady-state decode batch at a decode share (the take-turns step while a prefill runs)."""
        return self._little(rate, lambda b: self._step(b, decode_share))

    def saturation_rate(self, prefill_pct: int, decode_pct: int) -> float:
        """Per-replica arrivals/s at which the prefill queue stops draining at a split."""
        return self.prefill_speed(prefill_pct, decode_pct) / self.l100()

    def prefill_busy(self, prefill_pct: int, decode_pct: int, rate: float) -> float:
        """Fraction of time a prefill batch runs (0-1) at a split and per-replica arrival rate."""
        return min(1.0, rate * self.l100() / self.prefill_speed(prefill_pct, decode_pct))

    def itl(self, prefill_pct: int, decode_pct: int, rate: float, batch: float | None = None) -> float:
        """Predicted token-level p99 ITL (s) at a split and per-replica arrival rate (or decode batch)."""
        _, contended = contended_shares(prefill_pct / 100.0, decode_pct / 100.0)
        busy = self.prefill_busy(prefill_pct, decode_pct, rate)
        alone = min(1.0, decode_pct / 100.0)
        if busy > 1.0 - ITL_QUANTILE:
            share, under_prefill = contended, True
        else:
            share, under_prefill = alone, False
        if batch is not None:
            b = batch
        elif self.model.contention.take_turns:
            b = self.batch(share, rate)
        else:
            b = self._little(rate, lambda b: self._split_step(b, prefill_pct, decode_pct, under_prefill))
        return self.itl_scale(contended) * self._split_step(max(1.0, b), prefill_pct, decode_pct, under_prefill)

    def itl_scale(self, contended: float) -> float:
        """Observed / modelled ITL at a contended decode share (see Fit.itl_by_share)."""
        pts = self.fit.itl_by_share
        if not pts:
            return self.fit.itl_scale
        if contended <= pts[0][0]:
            return pts[0][1]
        for (y0, r0), (y1, r1) in itertools.pairwise(pts):
            if contended <= y1:
                return r0 + (r1 - r0) * (contended - y0) / (y1 - y0)
        return pts[-1][1]

    def ttft_attainment(self, prefill_pct: int, decode_pct: int, rate: float, ttft_slo: float) -> float:
        """Predicted fraction of requests whose TTFT meets `ttft_slo`: an exponential tail through the
        predicted p99 (queueing delay's tail is near exponential), so p99 == SLO gives 0.99."""
        p99 = self.ttft(prefill_pct, decode_pct, rate)
        return 1.0 - math.exp(-ttft_slo * math.log(100.0) / max(p99, 1e-9))

    def pinned(self, sample: Sample, itl: bool = True) -> Estimator:
        """This estimator pinned to one pod's own observation (a1 and, with `itl`, the ITL scale from
        this pod), so that it reproduces the observation at the pod's split and still ranks the others."""
        room = self._sample_speed(sample) - sample.rate * self.l100()
        fit = self.fit
        if room > 0:
            fit = replace(fit, a1=sample.ttft * room)
        if itl and sample.itl is not None and sample.batch is not None and sample.split is not None:
            modelled = _raw(self.model, fit).itl(*sample.split, sample.rate, sample.batch)
            if modelled > 0:
                share = round(sample.decode_share, 3)
                pts = {y: r for y, r in fit.itl_by_share if y != share}
                pts[share] = sample.itl / modelled
                fit = replace(fit, itl_scale=sample.itl / modelled, itl_by_share=tuple(sorted(pts.items())))
        return Estimator(self.model, fit)

    def headroom(self, prefill_pct: int, decode_pct: int, rate: float, ttft_slo: float, itl_slo: float) -> float:
        """min over both SLOs of (SLO - predicted) / SLO; negative means a predicted violation."""
        t = self.ttft(prefill_pct, decode_pct, rate)
        i = self.itl(prefill_pct, decode_pct, rate)
        return min((ttft_slo - t) / ttft_slo, (itl_slo - i) / itl_slo)

    def best_split(
        self, candidates: Sequence[tuple[int, int]], rate: float, ttft_slo: float, itl_slo: float
    ) -> tuple[tuple[int, int], float]:
        """The (prefill, decode) split with the most headroom (ties: the first candidate, i.e. the closest)."""
        best, best_h = candidates[0], -math.inf
        for x, y in candidates:
            h = self.headroom(x, y, rate, ttft_slo, itl_slo)
            if h > best_h + 1e-9:
                best, best_h = (x, y), h
        return best, best_h

    def capacity(self, candidates: Sequence[tuple[int, int]], ttft_slo: float, itl_slo: float, margin: float) -> float:
        """Highest per-replica arrival rate at which some candidate split keeps `margin` headroom on both
        SLOs, and at most BURST_UTILIZATION of its saturation rate. TTFT's limit is closed-form; ITL
        (increasing in the rate) is bisected only for candidates whose TTFT limit beats the best found
        so far."""
        ttft_cap, itl_cap = ttft_slo * (1.0 - margin), itl_slo * (1.0 - margin)
        if ttft_cap <= 0 or itl_cap <= 0:
            return 0.0
        l100 = self.l100()
        limits = []
        for x, y in candidates:
            share = self.prefill_speed(x, y)
            limits.append(
                (min((share - self.a1() / ttft_cap) / l100, BURST_UTILIZATION * self.saturation_rate(x, y)), (x, y))
            )
        limits.sort(key=lambda item: -item[0])
        best = 0.0
        for r_ttft, c in limits:
            if r_ttft <= best:
                break
            if self.itl(*c, r_ttft) <= itl_cap:
                best = r_ttft
                continue
            if self.itl(*c, best) > itl_cap:
                continue
            lo, hi = best, r_ttft
            for _ in range(16):
                mid = (lo + hi) / 2.0
                lo, hi = (mid, hi) if self.itl(*c, mid) <= itl_cap else (lo, mid)
            best = lo
        return max(0.0, best)


def refit(model: LatencyModel, fit: Fit) -> Fit:
    """Fit l100 (grid over the prior, the prior preferred within L100_TOLERANCE) and a1 (closed form)
    to the TTFT samples; ITL scale by EWMA.

    With fewer than three samples, or samples that all share one split and load, only a1 is fitted
    (the prior l100 stays): one point cannot separate the amplitude from the queueing pole.
    """
    # A saturated sample's TTFT is queue backlog (it grows with time, not with load): fitting it would
    # read as a tiny capacity and stop scale-out exactly when it is needed.
    samples = [s for s in fit.samples if s.ttft > 0 and math.isfinite(s.ttft) and not s.saturated]
    base = model.prefill_time([max(1, round(fit.prompt_tokens))], 1.0)
    raw = _raw(model, fit)
    speeds = [raw._sample_speed(s) for s in samples]
    distinct = len({(round(x, 3), round(s.rate, 2)) for x, s in zip(speeds, samples, strict=True)})
    scales = _L100_GRID if len(samples) >= 3 and distinct >= 2 else (fit.l100_scale,)
    fitted: list[tuple[float, float, float]] = []
    for scale in scales:
        l100 = base * scale
        g = [1.0 / (x - s.rate * l100) for x, s in zip(speeds, samples, strict=True) if x > s.rate * l100]
        if len(g) < len(samples) or not g:
            continue
        # Least squares on relative error: minimise sum((a*g - t)/t)^2.
        ts = [s.ttft for s in samples]
        num = sum(gi / t for gi, t in zip(g, ts, strict=True))
        den = sum((gi / t) ** 2 for gi, t in zip(g, ts, strict=True))
        a1 = num / den
        sse = sum(((a1 * gi - t) / t) ** 2 for gi, t in zip(g, ts, strict=True))
        fitted.append((sse, scale, a1))
    out = fit
    if fitted:
        # Far from saturation TTFT hardly depends on l100 (the pole is far away), so the least squares
        # is flat and its minimum wanders the whole grid with the noise: the scale nearest the prior
        # among those that fit about as well (see L100_TOLERANCE).
        tolerance = min(f[0] for f in fitted) + L100_TOLERANCE * len(samples) + 1e-12
        _, scale, a1 = min((f for f in fitted if f[0] <= tolerance), key=lambda f: (abs(math.log(f[1])), f[1]))
        out = replace(out, l100_scale=scale, a1=a1)
    itl_ratios = []
    by_share: dict[float, list[float]] = {}
    est = _raw(model, out)
    for i, s in enumerate(samples):
        if s.itl is not None and s.itl > 0 and s.batch is not None:
            modelled = est.itl(*s.split, s.rate, s.batch) if s.split else est._step(max(1.0, s.batch), s.decode_share)
            if modelled > 0:
                by_share.setdefault(round(s.decode_share, 3), []).append(s.itl / modelled)
                if i >= len(samples) - 6:
                    itl_ratios.append(s.itl / modelled)
    if itl_ratios:
        itl_ratios.sort()
        out = replace(out, itl_scale=itl_ratios[len(itl_ratios) // 2])
    if by_share:
        out = replace(out, itl_by_share=tuple(sorted((y, _median(r)) for y, r in by_share.items())))
    return out


def _median(values: list[float]) -> float:
    v = sorted(values)
    return v[len(v) // 2]


def _raw(model: LatencyModel, fit: Fit) -> Estimator:
    """The estimator without any ITL calibration (what the ratios are taken against)."""
    return Estimator(model, replace(fit, itl_scale=1.0, itl_by_share=()))
