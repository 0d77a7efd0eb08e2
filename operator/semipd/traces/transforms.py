"""Pure time and length transforms of a request list: shift, compress, rescale, window, clip, prefix reuse."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import replace

from semipd.traces.readers import BLOCK_TOKENS, TraceRequest


def shift(requests: Iterable[TraceRequest], offset_s: float) -> list[TraceRequest]:
    return [replace(r, arrival_s=r.arrival_s + offset_s) for r in requests]


def compress_time(requests: Iterable[TraceRequest], factor: float) -> list[TraceRequest]:
    """Replay `factor` times faster: arrivals divide by factor, so the rate multiplies by it."""
    if factor <= 0:
        raise ValueError(f"factor must be positive, got {factor}")
    return [replace(r, arrival_s=r.arrival_s / factor) for r in requests]


def mean_rate(requests: Sequence[TraceRequest]) -> float:
    """Requests per second over the span from the first to the last arrival."""
    if len(requests) < 2:
        return 0.0
    span = requests[-1].arrival_s - requests[0].arrival_s
    return (len(requests) - 1) / span if span > 0 else math.inf


def scale_to_rate(requests: Sequence[TraceRequest], rate: float) -> list[TraceRequest]:
    """Compress or stretch time so the mean arrival rate becomes `rate` req/s (burst shape kept)."""
    current = mean_rate(requests)
    if not math.isfinite(current) or current <= 0:
        raise ValueError("trace needs at least two requests at distinct times to be rate-scaled")
    return compress_time(requests, rate / current)


def window(requests: Sequence[TraceRequest], start_s: float, duration_s: float) -> list[TraceRequest]:
    """Requests arriving in [start_s, start_s + duration_s), rebased to start at 0."""
    end = start_s + duration_s
    return [replace(r, arrival_s=r.arrival_s - start_s) for r in requests if start_s <= r.arrival_s < end]


def clip_lengths(
    requests: Iterable[TraceRequest], max_input: int | None = None, max_output: int | None = None
) -> list[TraceRequest]:
    """Cap token counts (e.g. to a model's context); hash_ids are cut to the blocks still covered."""
    out = []
    for r in requests:
        inp = r.input_tokens if max_input is None else min(r.input_tokens, max_input)
        outp = r.output_tokens if max_output is None else min(r.output_tokens, max_output)
        blocks = r.hash_ids[: math.ceil(inp / BLOCK_TOKENS)] if r.hash_ids else ()
        out.append(TraceRequest(r.arrival_s, inp, outp, blocks))
    return out


def block_reuse_fraction(requests: Iterable[TraceRequest]) -> float:
    """Share of prefix blocks already seen earlier in the trace (the hit rate of an infinite cache)."""
    seen: set[int] = set()
    total = reused = 0
    for r in requests:
        for h in r.hash_ids:
            total += 1
            if h in seen:
                reused += 1
            else:
                seen.add(h)
    return reused / total if total else 0.0
