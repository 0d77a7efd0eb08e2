"""Balancedness as the reference, vLLM and SGLang define it."""

from __future__ import annotations

import numpy as np
import pytest

from semipd.policy.experts.metrics import (
    PlacementQuality,
    balancedness,
    device_loads,
    max_load_sum,
    max_over_mean,
    sglang_balancedness,
    vllm_balancedness,
)
from semipd.policy.experts.synthetic import zipf_load, zipf_suite


def test_device_loads_split_an_expert_evenly_over_its_replicas() -> None:
    # Devices of two slots: [0, 2], [0, 1], [3, 2]. Experts 0 (60 tokens) and 2 (4) have two replicas.
    loads = device_loads([[60.0, 10.0, 4.0, 2.0]], np.array([[0, 2, 0, 1, 3, 2]]), 3)
    assert loads.tolist() == [[32.0, 40.0, 4.0]]


def test_ratios_and_engine_balancedness() -> None:
    loads = np.array([[10.0, 10.0, 10.0, 10.0], [40.0, 0.0, 0.0, 0.0], [20.0, 20.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    assert max_over_mean(loads).tolist() == [1.0, 4.0, 2.0, 1.0]  # an idle layer counts as balanced
    assert balancedness(loads).tolist() == [1.0, 0.25, 0.5, 1.0]
    vb = vllm_balancedness(loads)
    assert (vb.min, vb.p50, vb.avg) == (0.25, 0.75, 0.6875)
    assert vb.p90 == pytest.approx(np.quantile([1.0, 0.25, 0.5, 1.0], 0.1))
    eps = 1e-5
    expected = np.mean([(10 + eps) / (10 + eps), (10 + eps) / (40 + eps), (10 + eps) / (20 + eps), 1.0])
    assert sglang_balancedness(loads) == pytest.approx(expected)
    assert max_load_sum(loads) == 70.0


def test_quality_summary() -> None:
    q = PlacementQuality.of([[3.0, 1.0], [1.0, 1.0]], np.array([[0, 1], [0, 1]]), 2)
    assert q.worst_max_over_mean == 1.5
    assert q.mean_max_over_mean == 1.25
    assert q.vllm.min == pytest.approx(2 / 3)
    assert q.max_load_sum == 4.0


def test_unplaced_expert_is_an_error() -> None:
    with pytest.raises(ValueError, match="no physical slot"):
        device_loads([[1.0, 2.0]], np.array([[0, 0]]), 1)


def test_zipf_suite_is_seeded_and_skewed() -> None:
    a = zipf_suite(3, layers=2, experts=32, k=4, seed=5)
    b = zipf_suite(3, layers=2, experts=32, k=4, seed=5)
    assert [s for s, _ in a] == [s for s, _ in b]
    assert all((wa == wb).all() for (_, wa), (_, wb) in zip(a, b, strict=True))
    for skew, w in a:
        assert 0.6 <= skew <= 1.4
        assert w.shape == (2, 32)
        assert (w.max(axis=1) > 3 * w.mean(axis=1)).all()  # a few experts get most of the tokens
    assert (zipf_load(1, 8, 2, 0.0, tokens=800, seed=0).sum() == 1600.0).all()
