"""An instance's prefix cache over Mooncake block ids (512 tokens each), least recently used out.

Mooncake's hash_ids identify a prefix up to and including each block, so a request's cached
prefix is the run of its leading ids present in the cache. Capacity is in blocks; it stands for
the radix cache living in the KV pool's free space (an estimate: the real cache shrinks while the
pool is busy).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from semipd.traces import BLOCK_TOKENS


class PrefixCache:
    __slots__ = ("_blocks", "capacity")

    def __init__(self, capacity_blocks: int) -> None:
        self.capacity = max(0, capacity_blocks)
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def match(self, hash_ids: Sequence[int]) -> int:
        """Leading blocks of `hash_ids` held by the cache (no recency update: a probe is not a use)."""
        n = 0
        blocks = self._blocks
        for h in hash_ids:
            if h not in blocks:
                break
            n += 1
        return n

    def insert(self, hash_ids: Sequence[int]) -> None:
        """Record that these blocks were computed (or reused) now."""
        blocks = self._blocks
        for h in hash_ids:
            if h in blocks:
                blocks.move_to_end(h)
            else:
                blocks[h] = None
        while len(blocks) > self.capacity:
            blocks.popitem(last=False)

    def __len__(self) -> int:
        return len(self._blocks)


def cached_tokens(blocks: int, input_tokens: int) -> int:
    """Prompt tokens a hit of `blocks` saves; at least one prompt token is always computed."""
    return max(0, min(blocks * BLOCK_TOKENS, input_tokens - 1))
