"""Synthetic arrivals: a renewal process (Poisson or gamma inter-arrivals) with fixed or resampled lengths."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from semipd.traces.readers import TraceRequest


def synthetic(
    rate: float,
    *,
    count: int | None = None,
    duration_s: float | None = None,
    cv: float = 1.0,
    input_tokens: int = 512,
    output_tokens: int = 128,
    lengths_from: Sequence[TraceRequest] | None = None,
    seed: int = 0,
) -> list[TraceRequest]:
    """Renewal-process arrivals at `rate` req/s: Poisson for cv = 1, gamma inter-arrivals otherwise.

    Bounded by `count` and/or `duration_s` (at least one is required). Token counts are fixed, or
    resampled (with the same seed) from `lengths_from`, e.g. a real trace's length distribution.
    """
    if rate <= 0 or not math.isfinite(rate):
        raise ValueError(f"rate must be positive, got {rate}")
    if cv <= 0:
        raise ValueError(f"cv must be positive, got {cv}")
    if count is None and duration_s is None:
        raise ValueError("synthetic arrivals need a count or a duration")
    if lengths_from is not None and not lengths_from:
        raise ValueError("lengths_from is empty")
    rng = random.Random(seed)
    shape = 1.0 / (cv * cv)
    scale = 1.0 / (rate * shape)
    out: list[TraceRequest] = []
    t = 0.0
    while count is None or len(out) < count:
        t += rng.gammavariate(shape, scale)
        if duration_s is not None and t >= duration_s:
            break
        if lengths_from is not None:
            src = lengths_from[rng.randrange(len(lengths_from))]
            out.append(TraceRequest(t, src.input_tokens, src.output_tokens, src.hash_ids))
        else:
            out.append(TraceRequest(t, input_tokens, output_tokens))
    return out
