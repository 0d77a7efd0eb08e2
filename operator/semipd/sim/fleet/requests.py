"""One simulated request's life (arrival to finish) and the per-request SLO verdict.

A plain slotted record: the simulator creates one per trace request and mutates it as the request
moves through router, prefill, KV transfer and decode. Times are simulation seconds.
"""

from __future__ import annotations

import math
from typing import Any

from semipd.traces import TraceRequest


class SimRequest:
    """A request in flight or done. `first_token` / `finish` stay NaN until they happen."""

    __slots__ = (
        "arrival",
        "cached",
        "dispatch",
        "finish",
        "first_token",
        "hash_ids",
        "id",
        "input",
        "instance",
        "kv_need",
        "new_tokens",
        "output",
        "prefill_exec",
        "rejected",
    )

    def __init__(self, rid: int, trace: TraceRequest) -> None:
        self.id = rid
        self.arrival = trace.arrival_s
        self.input = max(1, trace.input_tokens)
        self.output = max(1, trace.output_tokens)
        self.hash_ids = trace.hash_ids
        self.cached = 0
        """Prompt tokens served from the instance's prefix cache (set by the router)."""
        self.new_tokens = self.input
        """Prompt tokens that must be computed: input - cached."""
        self.kv_need = self.input + self.output
        """KV tokens reserved at admission (prompt + max_tokens, as the simulated engine does)."""
        self.dispatch = math.nan
        self.prefill_exec = math.nan
        """Seconds the prefill batch holding this request ran (Semi-PD's prefill_latency)."""
        self.first_token = math.nan
        self.finish = math.nan
        self.rejected = ""
        """Why the request was not served ("" if it was): context, kv, no-replica, dropped, unfinished."""
        self.instance: Any = None

    @property
    def done(self) -> bool:
        return not math.isnan(self.finish)

    @property
    def ttft(self) -> float:
        return self.first_token - self.arrival

    @property
    def tpot(self) -> float:
        """Mean inter-token latency after the first token (0 for single-token outputs)."""
        if self.output <= 1:
            return 0.0
        return (self.finish - self.first_token) / (self.output - 1)

    @property
    def waiting(self) -> float:
        """Seconds from arrival to the start of its prefill batch."""
        return self.dispatch - self.arrival

    def attains(self, ttft_slo: float, itl_slo: float) -> bool:
        """Served, TTFT within its SLO and mean inter-token latency (TPOT) within the ITL SLO."""
        return self.done and not self.rejected and self.ttft <= ttft_slo and self.tpot <= itl_slo
