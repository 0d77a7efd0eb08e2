"""Trace preparation for fleet runs: context clipping, rate scaling, windows, and a time-compressed
day shape (the real trace's requests, replayed along a diurnal rate curve), and a day whose
prompt/output mix shifts between chat and long documents (`mix_shift`).
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import replace

from semipd.traces.readers import TraceRequest, load_trace
from semipd.traces.transforms import clip_lengths, compress_time, mean_rate, scale_to_rate, shift


def prepare(
    name_or_path: str,
    *,
    context_length: int | None = None,
    max_output: int | None = None,
    rate: float | None = None,
    rate_scale: float | None = None,
    duration_s: float | None = None,
    max_requests: int | None = None,
) -> list[TraceRequest]:
    """Load a trace; fit lengths into the context (prompt cut so prompt + output fits); set the
    mean rate (absolute `rate` or `rate_scale` x the trace's own); keep the first `duration_s`."""
    reqs = load_trace(name_or_path)
    if max_output is not None:
        reqs = clip_lengths(reqs, max_output=max_output)
    if context_length is not None:
        fitted = []
        for r in reqs:
            if r.input_tokens + r.output_tokens > context_length:
                out = min(r.output_tokens, context_length // 2)
                r = clip_lengths([r], max_input=context_length - out, max_output=out)[0]
            fitted.append(r)
        reqs = fitted
    if rate is not None:
        reqs = scale_to_rate(reqs, rate)
    elif rate_scale is not None:
        reqs = compress_time(reqs, rate_scale)
    if duration_s is not None:
        reqs = [r for r in reqs if r.arrival_s < duration_s]
    if max_requests is not None:
        reqs = reqs[:max_requests]
    return reqs


def diurnal(t: float, day_s: float, trough: float) -> float:
    """Relative rate (peak 1) at time t of a day of length day_s: trough at t = 0, peak at day_s / 2."""
    return trough + (1.0 - trough) * 0.5 * (1.0 - math.cos(2.0 * math.pi * t / day_s))


def day_shape(
    requests: Sequence[TraceRequest], day_s: float, peak_rate: float, trough: float = 0.2, steps: int = 4096
) -> list[TraceRequest]:
    """The trace's requests (looped as needed) on one day of length `day_s` whose rate follows
    `diurnal` between trough x peak_rate and peak_rate. Time is warped, so the trace's own burst
    structure rides on the day curve."""
    if not requests or day_s <= 0 or peak_rate <= 0:
        raise ValueError("day_shape needs requests, a positive day length and a positive peak rate")
    base = mean_rate(requests)
    if not math.isfinite(base) or base <= 0:
        raise ValueError("trace needs at least two requests at distinct times")
    # Cumulative expected arrivals of the target day on a grid, inverted by interpolation.
    dt = day_s / steps
    grid = [0.0]
    for k in range(steps):
        t = (k + 0.5) * dt
        grid.append(grid[-1] + peak_rate * diurnal(t, day_s, trough) * dt)
    total = grid[-1]
    span = requests[-1].arrival_s - requests[0].arrival_s + 1.0 / base
    looped: list[TraceRequest] = []
    k = 0
    while not looped or looped[-1].arrival_s * base < total:
        looped.extend(shift(requests, k * span - requests[0].arrival_s))
        k += 1
    out = []
    for r in looped:
        c = r.arrival_s * base  # position in expected-arrival units
        if c >= total:
            break
        i = bisect_left(grid, c)
        i = max(1, min(i, steps))
        lo, hi = grid[i - 1], grid[i]
        frac = 0.0 if hi <= lo else (c - lo) / (hi - lo)
        out.append(replace(r, arrival_s=(i - 1 + frac) * dt))
    return out


def mix_shift(
    chat: Sequence[TraceRequest],
    documents: Sequence[TraceRequest],
    duration_s: float,
    rate: float,
    long_share: tuple[float, float] = (0.05, 0.5),
    seed: int = 0,
) -> list[TraceRequest]:
    """A day whose prompt/output mix shifts from chat to long documents and back.

    Poisson arrivals at `rate` over `duration_s`; at time t a request is a document with
    probability lo + (hi - lo) * diurnal(t, duration_s, 0) (lo at the start and end, hi mid-day),
    else a chat turn. Lengths are taken in order from the two shipped traces (cycled), so every
    request's shape is a real one; prefix ids are dropped (the two traces' ids are unrelated)."""
    lo, hi = long_share
    if not chat or not documents or duration_s <= 0 or rate <= 0 or not 0.0 <= lo <= hi <= 1.0:
        raise ValueError("mix_shift needs both traces, a positive duration and rate, and 0 <= lo <= hi <= 1")
    rng = random.Random(seed)
    out: list[TraceRequest] = []
    t, ci, di = 0.0, 0, 0
    while True:
        t += rng.expovariate(rate)
        if t >= duration_s:
            return out
        if rng.random() < lo + (hi - lo) * diurnal(t, duration_s, 0.0):
            src, di = documents[di % len(documents)], di + 1
        else:
            src, ci = chat[ci % len(chat)], ci + 1
        out.append(TraceRequest(t, src.input_tokens, src.output_tokens))
