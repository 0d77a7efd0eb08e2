"""Admission and prefill-batch formation for the simulated decode owner (pure, FCFS like SGLang).

KV is reserved for a request's whole length (prompt + max_tokens) when it is admitted to prefill, so
decode never runs out of KV mid-generation and nothing is retracted; requests wait in the queue
while the pool is full.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class KvPool:
    capacity: int
    reserved: int = 0

    def free(self) -> int:
        return self.capacity - self.reserved

    def reserve(self, tokens: int) -> None:
        if tokens > self.free():
            raise ValueError(f"cannot reserve {tokens} KV tokens, {self.free()} free")
        self.reserved += tokens

    def release(self, tokens: int) -> None:
        if tokens > self.reserved:
            raise ValueError(f"releasing {tokens} KV tokens, only {self.reserved} reserved")
        self.reserved -= tokens


def take_prefill_batch(
    prompt_lens: Sequence[int], kv_needs: Sequence[int], token_budget: int, kv_free: int, slots_free: int
) -> int:
    """How many requests from the head of the queue form the next prefill batch.

    Stops at the first request that does not fit (no overtaking). A single prompt longer than the
    token budget still runs, alone (the real engine would chunk it over several iterations).
    """
    taken = tokens = kv = 0
    for prompt, need in zip(prompt_lens, kv_needs, strict=True):
        if taken >= slots_free or kv + need > kv_free:
            break
        if taken and tokens + prompt > token_budget:
            break
        taken += 1
        tokens += prompt
        kv += need
    return taken
