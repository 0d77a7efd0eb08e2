"""Skewed top-k expert routing shares (pure)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from semipd.perf.moe import layer_hit_probabilities, topk_hit_probabilities, zipf_weights


@given(st.lists(st.floats(0.001, 100.0), min_size=2, max_size=64), st.data())
def test_hit_probabilities_sum_to_k_and_stay_feasible(weights: list[float], data: st.DataObject) -> None:
    k = data.draw(st.integers(1, len(weights)))
    q = topk_hit_probabilities(weights, k)
    assert sum(q) == pytest.approx(k)
    assert all(0.0 < p <= 1.0 + 1e-12 for p in q)
    # Order is preserved: a more popular expert is never hit less often.
    for i in range(len(q)):
        for j in range(len(q)):
            if weights[i] > weights[j]:
                assert q[i] >= q[j] - 1e-12


def test_extreme_skew_saturates_the_top_experts() -> None:
    # Unconstrained, expert 0 would get 1.05 hits per token; it is capped at 1 and the remaining
    # pick is shared by the rest in proportion to their weights.
    q = topk_hit_probabilities([1000.0, 900.0, 1.0, 1.0, 1.0, 1.0], 2)
    assert q[0] == 1.0
    assert q[1] == pytest.approx(900 / 904)
    assert q[2] == pytest.approx(1 / 904)
    assert topk_hit_probabilities([1.0, 2.0, 3.0], 3) == [1.0, 1.0, 1.0]


def test_zero_skew_is_uniform_and_layers_differ_when_skewed() -> None:
    uniform = layer_hit_probabilities(2, 8, 2, 0.0, seed=1)
    assert all(p == pytest.approx(0.25) for layer in uniform for p in layer)
    skewed = layer_hit_probabilities(3, 64, 8, 1.2, seed=1)
    assert max(skewed[0]) / min(skewed[0]) > 10
    assert skewed[0] != skewed[1]  # each layer has its own popular experts
    assert skewed == layer_hit_probabilities(3, 64, 8, 1.2, seed=1)


def test_zipf_weights_are_a_permutation_of_ranks() -> None:
    w = zipf_weights(5, 1.0, random.Random(0))
    assert sorted(w, reverse=True) == [1.0, 0.5, 1 / 3, 0.25, 0.2]


def test_bad_k() -> None:
    with pytest.raises(ValueError, match="k=0"):
        topk_hit_probabilities([1.0, 1.0], 0)
