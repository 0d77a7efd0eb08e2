"""Hardware and model constants for the latency model.

Plain frozen records plus the two lookup tables (HARDWARE, MODELS). Every number's source and
tag ([spec], [derived], [fit], [est], unverified) is listed in docs/latency-model.md; the short
comments here only say where a value came from when it is not a datasheet figure.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

Vendor = Literal["nvidia", "ascend"]


@dataclass(frozen=True, slots=True)
class HardwareProfile:
    """One accelerator (one GPU, or one Ascend NPU package) and the engine efficiencies measured on it."""

    name: str
    vendor: Vendor
    peak_tflops: float
    """Dense BF16/FP16 peak, TFLOP/s (no sparsity)."""
    hbm_gb: float
    """Device memory in decimal GB (1e9 bytes), as the reference's capacity arithmetic uses."""
    hbm_bandwidth_tbs: float
    """HBM bandwidth, TB/s."""
    compute_units: int
    """SMs (NVIDIA) or cube AI cores (Ascend): what a compute share is a fraction of."""
    partition_granularity: int
    """Smallest step of a share, in compute units (a TPC = 2 SMs; one AI core)."""
    mfu: float
    """Fraction of peak reached by the dense GEMMs of a prefill-sized batch."""
    attention_efficiency: float
    """Fraction of peak reached by the quadratic attention term."""
    bandwidth_efficiency: float
    """Fraction of peak HBM bandwidth reached by a decode step (eta)."""
    decode_share_sensitivity: float
    """a in g(y) = 1 + a*max(0, knee/y - 1): how much memory-bound time grows as the share y shrinks."""
    decode_share_knee: float
    """Share above which memory-bound time does not depend on the share (1.0 = sensitive everywhere)."""
    colocation_beta: float
    """Decode memory time is multiplied by (1 + beta) while a prefill batch runs on the same device."""
    allreduce_bandwidth_gbs: float
    """Effective per-device all-reduce bus bandwidth, GB/s (fitted/estimated, not the link spec)."""
    allreduce_latency_s: float
    """Fixed latency of one all-reduce call."""
    prefill_overhead_s: float
    """Fixed cost of one prefill batch (launches, scheduler, sampling)."""
    prefill_unhidden_weight_fraction: float
    """Fraction of a prefill batch's weight-read time not hidden under its compute (phi)."""
    decode_overhead_s: float
    """Fixed cost of one decode iteration."""
    per_sequence_overhead_s: float
    """Cost per running sequence per decode iteration (c_B)."""
    worker_start_s: float
    """Process start + device context + IPC attach of a standby worker, excluding per-layer work."""
    weight_load_gbs: float
    """Per-device weight load rate from a node-local cache on a full engine restart, GB/s."""
    graph_capture_s: float
    """Decode graph capture / warm-up on a full engine restart."""


@dataclass(frozen=True, slots=True)
class ModelProfile:
    """One model's shape, enough for FLOP, byte and KV-cache arithmetic."""

    name: str
    layers: int
    hidden: int
    q_heads: int
    kv_heads: int
    """KV heads (GQA). For MLA: 1, because the latent is shared by all heads."""
    head_dim: int
    """Query/key head dimension used by attention FLOPs (MLA: nope + rope)."""
    v_head_dim: int
    ffn: int
    """Dense FFN intermediate size (MoE models: of their dense layers)."""
    vocab: int
    params: float
    """Total parameters."""
    active_params: float
    """Parameters used per token (dense: = params)."""
    experts: int
    """Routed experts per MoE layer; 0 for dense models."""
    experts_per_token: int
    moe_layers: int
    expert_params: float
    """Parameters of one routed expert in one layer (3 * hidden * moe_intermediate)."""
    bytes_per_param: float
    """2 for BF16 weights, 1 for FP8."""
    kv_bytes_per_token: int
    """KV-cache bytes per token for the whole model, unsharded."""
    kv_replicated_across_tp: bool
    """True for MLA: every TP rank holds the full latent."""
    max_context: int

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def attention_flops_per_pair(self) -> float:
        """FLOPs of one (query, key) pair in one layer: QK^T plus PV over all query heads."""
        return 2.0 * self.q_heads * (self.head_dim + self.v_head_dim)


GB = 1e9

# --- hardware -------------------------------------------------------------------------------------
# A100's efficiencies and overheads are fitted to DistServe's A100-80G profile (the engine behind the
# Semi-PD paper's Llama results); the other devices' are estimates. See docs/latency-model.md.

_GIB_IN_GB = 2**30 / GB

A100 = HardwareProfile(
    name="a100",
    vendor="nvidia",
    peak_tflops=312.0,
    hbm_gb=80.0,
    hbm_bandwidth_tbs=2.039,
    compute_units=108,
    partition_granularity=2,
    mfu=0.81,  # DistServe OPT-13B TP1 prefill slope 0.1019 ms/token
    attention_efficiency=0.184,  # DistServe quadratic coefficient 7.12e-6 ms/token^2
    bandwidth_efficiency=0.635,  # DistServe decode intercept 19.93 ms and slope 6.27e-4 ms/token
    decode_share_sensitivity=0.595,  # Semi-PD scale_tpot 0.6099 / scale_tpot(100) 1.0253
    decode_share_knee=1.0,
    colocation_beta=0.2,
    allreduce_bandwidth_gbs=100.0,  # best fit to DistServe OPT-13B TP2/TP4 prefill (max error 9 %)
    allreduce_latency_s=10e-6,
    # DistServe prefill intercepts 18.10 / 14.74 / 12.06 ms at TP1/2/4 = 11.4 ms + phi x weight-read time
    prefill_overhead_s=0.0114,
    prefill_unhidden_weight_fraction=0.338,
    decode_overhead_s=0.0,  # DistServe's decode intercept is all weight reads at eta = 0.635
    per_sequence_overhead_s=0.0385e-3,  # DistServe decode c = 0.0385 ms per sequence
    worker_start_s=3.0,
    weight_load_gbs=2.0,
    graph_capture_s=10.0,
)

H100 = replace(
    A100,
    name="h100",
    peak_tflops=989.4,
    hbm_gb=80.0,
    hbm_bandwidth_tbs=3.35,
    compute_units=132,
    mfu=0.6,
    attention_efficiency=0.5,
    bandwidth_efficiency=0.82,
    allreduce_bandwidth_gbs=150.0,  # A100 fit x NVLink4/NVLink3 (450/300 GB/s per direction)
    prefill_overhead_s=0.005,
    prefill_unhidden_weight_fraction=0.0,
    decode_overhead_s=0.0003,
    per_sequence_overhead_s=0.02e-3,
)

ASCEND_910B2 = HardwareProfile(
    name="ascend-910b2",
    vendor="ascend",
    peak_tflops=354.0,  # 24 AIC x 1.8 GHz x 16^3 MAC x 2
    hbm_gb=64.0 * _GIB_IN_GB,
    hbm_bandwidth_tbs=1.6,
    compute_units=24,
    partition_granularity=1,
    mfu=0.5,
    attention_efficiency=0.35,
    bandwidth_efficiency=0.65,
    decode_share_sensitivity=0.595,
    decode_share_knee=1.0,
    colocation_beta=0.2,
    allreduce_bandwidth_gbs=50.0,
    allreduce_latency_s=20e-6,
    prefill_overhead_s=0.008,
    prefill_unhidden_weight_fraction=0.0,
    decode_overhead_s=0.001,
    per_sequence_overhead_s=0.03e-3,
    worker_start_s=5.0,
    weight_load_gbs=2.0,
    graph_capture_s=20.0,
)

HARDWARE: dict[str, HardwareProfile] = {
    hw.name: hw
    for hw in (
        A100,
        replace(A100, name="a100-40gb", hbm_gb=40.0, hbm_bandwidth_tbs=1.555),
        H100,
        replace(H100, name="h200", peak_tflops=989.0, hbm_gb=141.0, hbm_bandwidth_tbs=4.8),
        replace(H100, name="h20", peak_tflops=148.0, hbm_gb=96.0, hbm_bandwidth_tbs=4.0, compute_units=78),
        # 910B1: only memory and core counts are published; peak and bandwidth assumed as 910B2's.
        replace(ASCEND_910B2, name="ascend-910b1", hbm_gb=64.0),
        ASCEND_910B2,
        replace(ASCEND_910B2, name="ascend-910b3", peak_tflops=295.0, hbm_gb=64.0, compute_units=20),
        # 910B4: 20 AIC at a 1.5 GHz cube clock (the clock is unverified).
        replace(
            ASCEND_910B2, name="ascend-910b4", peak_tflops=246.0, hbm_gb=32.0, hbm_bandwidth_tbs=0.8, compute_units=20
        ),
        # 910C: one package = two dies; Huawei's CloudMatrix report gives 752 TFLOPS per package.
        replace(
            ASCEND_910B2, name="ascend-910c", peak_tflops=752.0, hbm_gb=128.0, hbm_bandwidth_tbs=3.2, compute_units=48
        ),
    )
}

# --- models ---------------------------------------------------------------------------------------


def _gqa_kv_bytes(layers: int, kv_heads: int, head_dim: int, dtype_bytes: int = 2) -> int:
    return 2 * layers * kv_heads * head_dim * dtype_bytes


def _dense(
    name: str,
    layers: int,
    hidden: int,
    q_heads: int,
    kv_heads: int,
    ffn: int,
    vocab: int,
    params: float,
    max_context: int,
) -> ModelProfile:
    return ModelProfile(
        name=name,
        layers=layers,
        hidden=hidden,
        q_heads=q_heads,
        kv_heads=kv_heads,
        head_dim=128,
        v_head_dim=128,
        ffn=ffn,
        vocab=vocab,
        params=params,
        active_params=params,
        experts=0,
        experts_per_token=0,
        moe_layers=0,
        expert_params=0.0,
        bytes_per_param=2.0,
        kv_bytes_per_token=_gqa_kv_bytes(layers, kv_heads, 128),
        kv_replicated_across_tp=False,
        max_context=max_context,
    )


MODELS: dict[str, ModelProfile] = {
    m.name: m
    for m in (
        _dense("llama-3-8b", 32, 4096, 32, 8, 14336, 128256, 8.03e9, 8192),
        _dense("llama-3-70b", 80, 8192, 64, 8, 28672, 128256, 70.6e9, 8192),
        _dense("qwen3-32b", 64, 5120, 64, 8, 25600, 151936, 32.8e9, 32768),
        # OPT-13B is here only because DistServe's published A100 coefficients are for it (MHA).
        _dense("opt-13b", 40, 5120, 40, 40, 20480, 50272, 12.85e9, 2048),
        ModelProfile(
            name="qwen3-30b-a3b",
            layers=48,
            hidden=2048,
            q_heads=32,
            kv_heads=4,
            head_dim=128,
            v_head_dim=128,
            ffn=6144,
            vocab=151936,
            params=30.5e9,
            active_params=3.3e9,
            experts=128,
            experts_per_token=8,
            moe_layers=48,
            expert_params=3 * 2048 * 768,
            bytes_per_param=2.0,
            kv_bytes_per_token=_gqa_kv_bytes(48, 4, 128),
            kv_replicated_across_tp=False,
            max_context=32768,
        ),
        ModelProfile(
            name="qwen3-235b-a22b",
            layers=94,
            hidden=4096,
            q_heads=64,
            kv_heads=4,
            head_dim=128,
            v_head_dim=128,
            ffn=12288,
            vocab=151936,
            params=235e9,
            active_params=22e9,
            experts=128,
            experts_per_token=8,
            moe_layers=94,
            expert_params=3 * 4096 * 1536,
            bytes_per_param=2.0,
            kv_bytes_per_token=_gqa_kv_bytes(94, 4, 128),
            kv_replicated_across_tp=False,
            max_context=32768,
        ),
        ModelProfile(
            # MLA: KV latent (512) + rope key (64) per layer in BF16; weights served in FP8.
            name="deepseek-v3",
            layers=61,
            hidden=7168,
            q_heads=128,
            kv_heads=1,
            head_dim=192,
            v_head_dim=128,
            ffn=18432,
            vocab=129280,
            params=671e9,
            active_params=37e9,
            experts=256,
            experts_per_token=8,
            moe_layers=58,
            expert_params=3 * 7168 * 2048,
            bytes_per_param=1.0,
            kv_bytes_per_token=(512 + 64) * 61 * 2,
            kv_replicated_across_tp=True,
            max_context=163840,
        ),
    )
}
