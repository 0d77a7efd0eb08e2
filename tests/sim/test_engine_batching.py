"""FCFS prefill batch formation and KV reservation (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from semipd.sim.engine.batching import KvPool, take_prefill_batch


def test_batch_respects_token_budget() -> None:
    assert take_prefill_batch([3000, 3000, 3000], [3100] * 3, 8192, 10**6, 100) == 2


def test_oversized_prompt_runs_alone() -> None:
    assert take_prefill_batch([9000, 10], [9100, 20], 8192, 10**6, 100) == 1


def test_kv_and_slots_block_the_head() -> None:
    assert take_prefill_batch([10, 10, 10], [500, 500, 500], 8192, 1000, 100) == 2
    assert take_prefill_batch([10, 10, 10], [500, 500, 500], 8192, 499, 100) == 0
    assert take_prefill_batch([10, 10, 10], [1, 1, 1], 8192, 100, 1) == 1
    # No overtaking: a small request behind a blocked one waits.
    assert take_prefill_batch([10, 10], [2000, 1], 8192, 1000, 100) == 0


def test_pool_accounting() -> None:
    pool = KvPool(100)
    pool.reserve(60)
    assert pool.free() == 40
    with pytest.raises(ValueError, match="cannot reserve"):
        pool.reserve(41)
    pool.release(60)
    with pytest.raises(ValueError, match="only 0 reserved"):
        pool.release(1)


@given(
    st.lists(st.tuples(st.integers(1, 10000), st.integers(0, 20000)), max_size=30),
    st.integers(1, 16384),
    st.integers(0, 100000),
    st.integers(0, 40),
)
def test_batch_never_exceeds_limits(reqs: list[tuple[int, int]], budget: int, kv_free: int, slots: int) -> None:
    prompts = [p for p, _ in reqs]
    needs = [n for _, n in reqs]
    n = take_prefill_batch(prompts, needs, budget, kv_free, slots)
    assert 0 <= n <= min(len(reqs), slots)
    assert sum(needs[:n]) <= kv_free
    if n > 1:
        assert sum(prompts[:n]) <= budget
