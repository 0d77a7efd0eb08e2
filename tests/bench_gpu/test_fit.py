"""The contention fit recovers known k and eps from synthetic latencies (no torch needed)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.gpu.fit import (
    SCHEMA,
    Sample,
    contention_document,
    corun_speed,
    fit_contention,
    fit_interference,
    fit_k,
    standalone_speed,
)

SHARES = (0.125, 0.25, 0.4, 0.5, 0.6, 0.75)
PAIRS = ((0.5, 0.5), (0.7, 0.3), (0.3, 0.7))


def synthetic(model: str, k_p: float, k_d: float, eps: float, noise: float = 0.0, seed: int = 0) -> list[Sample]:
    """Latencies a GPU obeying the model exactly would give (plus optional multiplicative noise)."""
    rng = np.random.default_rng(seed)
    base = {"prefill": 0.012, "decode": 0.004}
    ks = {"prefill": k_p, "decode": k_d}
    out = []

    def jitter() -> float:
        return float(1.0 + noise * rng.standard_normal())

    for phase in ("prefill", "decode"):
        out.append(Sample(model, phase, f"{phase}-a", 1.0, 0.0, base[phase]))
        for s in SHARES:
            out.append(
                Sample(model, phase, f"{phase}-a", s, 0.0, base[phase] / standalone_speed(s, ks[phase]) * jitter())
            )
    for x, y in PAIRS:
        v_p = corun_speed(x, y, k_p, eps)
        v_d = corun_speed(y, x, k_d, eps)
        out.append(Sample(model, "prefill", "prefill-a", x, y, base["prefill"] / v_p * jitter()))
        out.append(Sample(model, "decode", "decode-a", y, x, base["decode"] / v_d * jitter()))
    return out


def test_g_spans_take_turns_to_share_insensitive():
    assert standalone_speed(0.3, 1.0) == pytest.approx(0.3)  # proportional
    assert standalone_speed(0.3, 0.0) == pytest.approx(1.0)  # share-insensitive
    assert standalone_speed(1.0, 0.6) == pytest.approx(1.0)


@pytest.mark.parametrize("k", [0.0, 0.1, 0.2, 0.6, 1.0, 2.5])
def test_fit_k_recovers_exact_k(k):
    shares = np.array(SHARES)
    assert fit_k(shares, standalone_speed(shares, k)) == pytest.approx(k, abs=1e-6)


def test_fit_k_ignores_whole_gpu_points_and_needs_a_partial_share():
    with pytest.raises(ValueError, match=r"below 1\.0"):
        fit_k([1.0, 1.0], [1.0, 1.0])
    assert fit_k([1.0, 0.5], [0.2, standalone_speed(0.5, 0.4)]) == pytest.approx(0.4, abs=1e-6)


@pytest.mark.parametrize(("k_p", "k_d", "eps"), [(0.6, 0.2, 0.2), (0.4, 0.1, 0.0), (1.0, 0.6, 0.4), (0.5, 0.15, -0.1)])
def test_fit_contention_recovers_known_parameters(k_p, k_d, eps):
    f = fit_contention(synthetic("m", k_p, k_d, eps))
    assert (f.prefill_k, f.decode_k, f.interference) == pytest.approx((k_p, k_d, eps), abs=1e-6)
    assert f.rms_standalone < 1e-9
    assert f.rms_corun < 1e-9


def test_fit_contention_is_close_under_two_percent_noise():
    f = fit_contention(synthetic("m", 0.6, 0.2, 0.25, noise=0.02, seed=3))
    assert f.prefill_k == pytest.approx(0.6, abs=0.08)
    assert f.decode_k == pytest.approx(0.2, abs=0.05)
    assert f.interference == pytest.approx(0.25, abs=0.08)
    assert 0.0 < f.rms_standalone < 0.05


def test_fit_interference_needs_a_corun_point():
    with pytest.raises(ValueError, match="other_share > 0"):
        fit_interference([(0.5, 0.0, 0.3, 0.8)])


def test_speeds_need_a_whole_gpu_solo_per_config():
    samples = [Sample("m", "prefill", "a", 0.5, 0.0, 0.02)]
    with pytest.raises(ValueError, match="whole-GPU solo"):
        fit_contention(samples)


def test_bad_sample_is_rejected_with_the_sample_named():
    with pytest.raises(ValueError, match="latency must be positive"):
        fit_contention([Sample("m", "prefill", "a", 1.0, 0.0, 0.0)])


def test_document_has_the_simulators_schema_and_per_model_fits():
    samples = synthetic("llama-3-8b", 0.6, 0.2, 0.2) + synthetic("qwen3-32b", 0.8, 0.3, 0.1)
    doc = contention_document(
        samples=samples, hardware="h200", device="NVIDIA H200", partitioning="green-context", measured_at="t"
    )
    assert doc["schema"] == SCHEMA
    assert set(doc["per_model"]) == {"llama-3-8b", "qwen3-32b"}
    assert doc["per_model"]["qwen3-32b"]["prefill_k"] == pytest.approx(0.8, abs=1e-6)
    assert doc["per_model"]["llama-3-8b"]["interference"] == pytest.approx(0.2, abs=1e-6)
    # The pooled fit lies between the two models' values.
    assert 0.6 < doc["prefill_k"] < 0.8
    assert 0.1 < doc["interference"] < 0.2
    assert doc["per_model"]["qwen3-32b"]["k_by_config"] == pytest.approx({"decode-a": 0.3, "prefill-a": 0.8}, abs=1e-6)
    raw = doc["per_model"]["llama-3-8b"]["samples"]
    assert len(raw) == len(synthetic("x", 0.6, 0.2, 0.2))
    assert {"phase", "share", "other_share", "latency_s", "speed"} <= set(raw[0])


def test_unpartitioned_streams_write_no_fit():
    samples = [
        Sample("m", "prefill", "p", 1.0, 0.0, 0.01),
        Sample("m", "decode", "d", 1.0, 0.0, 0.004),
        Sample("m", "prefill", "p", 1.0, 1.0, 0.013),
        Sample("m", "decode", "d", 1.0, 1.0, 0.006),
    ]
    doc = contention_document(samples=samples, hardware="h200", device="x", partitioning="streams", measured_at="t")
    assert doc["prefill_k"] is None
    assert doc["interference"] is None
    speeds = [r["speed"] for r in doc["per_model"]["m"]["samples"]]
    assert speeds == pytest.approx([1.0, 1.0, 0.01 / 0.013, 0.004 / 0.006])
