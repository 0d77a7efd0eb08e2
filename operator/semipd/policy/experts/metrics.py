"""Balancedness of an expert placement, as the reference and the engines define it (pure).

A device's load is the sum over its slots of w[e] / logcnt[e] (tokens of an expert split evenly
over its replicas). Per layer: max/mean is the peak-to-average ratio that FlashLB and vllm-ascend
report; balancedness = mean/max is what vLLM exports (min, p50, 10th percentile, average over
layers); SGLang averages (mean + 1e-5) / (max + 1e-5) over layers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from semipd.policy.experts.layout import FloatArray, IntArray, Weight, as_weight

SGLANG_EPS = 1e-5


def device_loads(weight: Weight, phy2log: IntArray, num_gpus: int) -> FloatArray:
    """Tokens per device [L, D] under even splitting over replicas."""
    w = as_weight(weight)
    layers, experts = w.shape
    p2l = np.asarray(phy2log, dtype=np.int64)
    if p2l.shape[0] != layers or p2l.shape[1] % num_gpus:
        raise ValueError(f"phy2log {p2l.shape} does not fit {layers} layers on {num_gpus} devices")
    counts = np.zeros((layers, experts), dtype=np.float64)
    np.add.at(counts, (np.arange(layers)[:, None], p2l), 1.0)
    if np.any(counts == 0):
        raise ValueError("a logical expert has no physical slot")
    per_slot = np.take_along_axis(w / counts, p2l, axis=1)
    loads: FloatArray = per_slot.reshape(layers, num_gpus, -1).sum(axis=2)
    return loads


def max_over_mean(loads: FloatArray) -> FloatArray:
    """Peak-to-average ratio per layer; an idle layer counts as perfectly balanced (1.0)."""
    peak = loads.max(axis=1)
    mean = loads.mean(axis=1)
    return np.where(peak > 0, peak / np.where(mean > 0, mean, 1.0), 1.0)


def balancedness(loads: FloatArray) -> FloatArray:
    """mean/max per layer in (0, 1] (vLLM's and the reference's definition)."""
    return 1.0 / max_over_mean(loads)


@dataclass(frozen=True)
class VllmBalancedness:
    """Balancedness summary in vLLM EPLB's terms (worst, median, 10th-percentile and mean layer); vLLM
    0.32 only logs it (`log_balancedness`) and exports no Prometheus series for it."""

    min: float
    p50: float
    p90: float
    avg: float


def vllm_balancedness(loads: FloatArray) -> VllmBalancedness:
    b = balancedness(loads)
    # p90 is "90 % of layers are at least this balanced": the 10th percentile (linear interpolation).
    return VllmBalancedness(
        min=float(b.min()), p50=float(np.median(b)), p90=float(np.quantile(b, 0.1)), avg=float(b.mean())
    )


def sglang_balancedness(loads: FloatArray) -> float:
    """SGLang's `[Expert Balancedness]`: mean over layers of (avg + 1e-5) / (max + 1e-5)."""
    return float(np.mean((loads.mean(axis=1) + SGLANG_EPS) / (loads.max(axis=1) + SGLANG_EPS)))


def max_load_sum(loads: FloatArray) -> float:
    """Sum over layers of the busiest device's load: a layer ends when its slowest rank ends."""
    return float(loads.max(axis=1).sum())


@dataclass(frozen=True)
class PlacementQuality:
    """What status and the benchmark report about one placement of one pool."""

    worst_max_over_mean: float
    """Max/mean of the worst layer: the number the rebalance threshold is compared with."""
    mean_max_over_mean: float
    vllm: VllmBalancedness
    sglang: float
    max_load_sum: float

    @classmethod
    def of(cls, weight: Weight, phy2log: IntArray, num_gpus: int) -> PlacementQuality:
        loads = device_loads(weight, phy2log, num_gpus)
        ratio = max_over_mean(loads)
        return cls(
            worst_max_over_mean=float(ratio.max()),
            mean_max_over_mean=float(ratio.mean()),
            vllm=vllm_balancedness(loads),
            sglang=sglang_balancedness(loads),
            max_load_sum=max_load_sum(loads),
        )
