"""Roofline latency model of one semi-PD engine instance (one TP group of identical devices).

Prefill time is FLOPs over the prefill worker's compute share; a decode step is bytes moved (weights,
for MoE only the experts the batch touches, plus the batch's KV cache) over bandwidth, which degrades
with the decode worker's share as Semi-PD measured. While both workers run, `prefill_batch_time` and
`decode_batch_time` apply the contention model (semipd.perf.contention). Constants live in semipd.perf.profiles; sources
and estimates are in docs/latency-model.md. Pure and allocation-free per call: the fleet simulator
calls it millions of times.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from semipd.perf.contention import TAKE_TURNS, ContentionModel, contended_shares
from semipd.perf.profiles import GB, HARDWARE, MODELS, HardwareProfile, ModelProfile

__all__ = [
    "HARDWARE",
    "MODELS",
    "HardwareProfile",
    "LatencyModel",
    "ModelFitError",
    "ModelProfile",
]


_SHARE_CACHE_SIZE = 1024


class ModelFitError(ValueError):
    """The model's weights do not fit the devices at the requested memory fraction."""


def _chunked_prefill_size(hardware: HardwareProfile) -> int:
    # SGLang 0.4.4 (the Semi-PD fork): 8192 tokens, 2048 on devices with less than 25 GB.
    return 2048 if hardware.hbm_gb < 25.0 else 8192


class LatencyModel:
    """Step times, KV capacity and switch costs for `model` on `tp` devices of `hardware`."""

    __slots__ = (
        "_allreduce_latency",
        "_allreduce_per_token",
        "_attn_flops_per_pair",
        "_bandwidth",
        "_compute",
        "_corun_cache",
        "_decode_t0",
        "_dense_weight_bytes",
        "_expert_bytes",
        "_flops_per_token",
        "_granule",
        "_kv_bytes",
        "_kv_capacity",
        "_prefill_attn_compute",
        "_prefill_phi",
        "_prefill_t0",
        "_share_cache",
        "_share_units",
        "contention",
        "hardware",
        "max_batch_tokens",
        "mem_fraction",
        "model",
        "tp",
    )

    def __init__(
        self,
        hardware: HardwareProfile,
        model: ModelProfile,
        tp: int = 1,
        mem_fraction: float = 0.9,
        contention: ContentionModel = TAKE_TURNS,
    ) -> None:
        if tp < 1:
            raise ValueError(f"tp must be >= 1, got {tp}")
        if not 0.0 < mem_fraction <= 1.0:
            raise ValueError(f"mem_fraction must be in (0, 1], got {mem_fraction}")
        self.hardware = hardware
        self.model = model
        self.tp = tp
        self.mem_fraction = mem_fraction
        self.contention = contention
        self.max_batch_tokens = _chunked_prefill_size(hardware)

        hw, m = hardware, model
        peak = hw.peak_tflops * 1e12
        self._compute = peak * hw.mfu
        self._prefill_attn_compute = peak * hw.attention_efficiency
        self._bandwidth = hw.hbm_bandwidth_tbs * 1e12 * hw.bandwidth_efficiency
        self._flops_per_token = 2.0 * m.active_params / tp
        self._attn_flops_per_pair = m.attention_flops_per_pair * m.layers / tp
        routed = m.moe_layers * m.experts * m.expert_params
        self._dense_weight_bytes = (m.params - routed) * m.bytes_per_param / tp
        self._expert_bytes = m.moe_layers * m.expert_params * m.bytes_per_param / tp
        self._kv_bytes = self._kv_bytes_per_token_per_device()
        self._granule = hw.partition_granularity / hw.compute_units
        self._share_units = hw.compute_units / hw.partition_granularity
        self._share_cache: dict[float, tuple[float, float]] = {}
        self._corun_cache: dict[tuple[float | None, float | None], tuple[float, float]] = {}
        if tp > 1:
            # Two all-reduces per layer (after attention and after the MLP), ring algorithm.
            self._allreduce_latency = 2 * m.layers * hw.allreduce_latency_s
            ring = 2.0 * (tp - 1) / tp
            self._allreduce_per_token = 2 * m.layers * ring * m.hidden * 2.0 / (hw.allreduce_bandwidth_gbs * GB)
        else:
            self._allreduce_latency = 0.0
            self._allreduce_per_token = 0.0
        self._prefill_t0 = hw.prefill_overhead_s
        self._prefill_phi = hw.prefill_unhidden_weight_fraction
        self._decode_t0 = hw.decode_overhead_s
        free = hw.hbm_gb * GB * mem_fraction - self.weights_bytes()
        if free <= 0:
            raise ModelFitError(
                f"{m.name} needs {self.weights_bytes() / GB:.1f} GB per device at tp={tp}; "
                f"{hw.name} offers {hw.hbm_gb * mem_fraction:.1f} GB at mem_fraction={mem_fraction}"
            )
        self._kv_capacity = int(free // self._kv_bytes)

    @classmethod
    def from_names(
        cls,
        hardware: str,
        model: str,
        tp: int = 1,
        mem_fraction: float = 0.9,
        contention: ContentionModel = TAKE_TURNS,
    ) -> LatencyModel:
        try:
            hw = HARDWARE[hardware]
        except KeyError:
            raise KeyError(f"unknown hardware {hardware!r}; known: {sorted(HARDWARE)}") from None
        try:
            mp = MODELS[model]
        except KeyError:
            raise KeyError(f"unknown model {model!r}; known: {sorted(MODELS)}") from None
        return cls(hw, mp, tp, mem_fraction, contention)

    def with_changes(
        self, hardware: HardwareProfile | None = None, contention: ContentionModel | None = None
    ) -> LatencyModel:
        """The same model and TP on changed hardware constants and/or contention parameters."""
        return LatencyModel(
            hardware or self.hardware,
            self.model,
            self.tp,
            self.mem_fraction,
            self.contention if contention is None else contention,
        )

    # --- memory -----------------------------------------------------------------------------------

    def _kv_bytes_per_token_per_device(self) -> float:
        m = self.model
        if m.kv_replicated_across_tp:
            return float(m.kv_bytes_per_token)
        heads_per_rank = max(1, m.kv_heads // self.tp)
        return m.kv_bytes_per_token * heads_per_rank / m.kv_heads

    def weights_bytes(self) -> float:
        """Weight bytes held by each device."""
        return self.model.params * self.model.bytes_per_param / self.tp

    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes one token occupies on each device."""
        return self._kv_bytes

    def kv_capacity_tokens(self) -> int:
        """Tokens the shared KV pool holds: (HBM x mem_fraction - weights) / KV bytes per token.

        The (1 - mem_fraction) remainder is what SGLang's mem_fraction_static leaves for
        activations and graphs.
        """
        return self._kv_capacity

    def expected_experts_touched(self, tokens: int) -> float:
        """Expected distinct routed experts per MoE layer hit by `tokens` tokens under uniform routing."""
        m = self.model
        if m.experts == 0 or tokens <= 0:
            return 0.0
        return m.experts * (1.0 - (1.0 - m.experts_per_token / m.experts) ** tokens)

    # --- shares -----------------------------------------------------------------------------------

    def effective_share(self, share: float) -> float:
        """The share actually granted: rounded down to whole partition steps (TPCs, AI cores), at least one."""
        if not 0.0 < share <= 1.0:
            raise ValueError(f"share must be in (0, 1], got {share}")
        steps = math.floor(share * self._share_units + 1e-9)
        return max(steps, 1) * self._granule

    def _share_factors(self, share: float) -> tuple[float, float]:
        """(effective share, bandwidth slowdown), memoized: callers reuse a handful of shares."""
        cached = self._share_cache.get(share)
        if cached is None:
            eff = self.effective_share(share)
            cached = (eff, self.bandwidth_slowdown(eff))
            if len(self._share_cache) >= _SHARE_CACHE_SIZE:
                self._share_cache.clear()
            self._share_cache[share] = cached
        return cached

    def bandwidth_slowdown(self, share: float) -> float:
        """g(y) >= 1: how much slower memory-bound work runs at compute share y (Semi-PD TPOT fit)."""
        hw = self.hardware
        return 1.0 + hw.decode_share_sensitivity * max(0.0, hw.decode_share_knee / share - 1.0)

    # --- step times -------------------------------------------------------------------------------

    def prefill_time(
        self, prompt_lens: Sequence[int], prefill_share: float, prefix_lens: Sequence[int] | None = None
    ) -> float:
        """Seconds for one prefill batch of new-token counts `prompt_lens` at compute share `prefill_share`.

        `prefix_lens[i]` tokens of request i are already cached (radix/prefix hit) and are only read.
        """
        s, slowdown = self._share_factors(prefill_share)
        new = 0
        pairs = 0.0
        context = 0
        if prefix_lens is None:
            for c in prompt_lens:
                new += c
                pairs += c * c * 0.5
            context = new
        else:
            for c, p in zip(prompt_lens, prefix_lens, strict=True):
                new += c
                pairs += c * (p + c * 0.5)
                context += p + c
        if new <= 0:
            return 0.0
        compute = (
            self._flops_per_token * new / self._compute + self._attn_flops_per_pair * pairs / self._prefill_attn_compute
        ) / s
        weights = self._dense_weight_bytes + self._expert_bytes * self.expected_experts_touched(new)
        memory = (weights + self._kv_bytes * context) / self._bandwidth * slowdown
        unhidden = self._prefill_phi * weights / self._bandwidth * slowdown
        comm = self._allreduce_latency + self._allreduce_per_token * new if self.tp > 1 else 0.0
        return (compute if compute > memory else memory) + unhidden + comm + self._prefill_t0

    def decode_step_time(
        self, batch_size: int, kv_tokens: int, decode_share: float, prefill_running: bool = False
    ) -> float:
        """Seconds for one decode iteration of `batch_size` sequences holding `kv_tokens` context tokens.

        `prefill_running` adds memory contention from a concurrent prefill batch on the same device.
        """
        if batch_size <= 0:
            return 0.0
        y, slowdown = self._share_factors(decode_share)
        hw = self.hardware
        weights = self._dense_weight_bytes + self._expert_bytes * self.expected_experts_touched(batch_size)
        memory = (weights + self._kv_bytes * kv_tokens) / self._bandwidth * slowdown
        if prefill_running:
            memory *= 1.0 + hw.colocation_beta
        compute = (self._flops_per_token * batch_size + self._attn_flops_per_pair * kv_tokens) / (self._compute * y)
        comm = self._allreduce_latency + self._allreduce_per_token * batch_size if self.tp > 1 else 0.0
        return (
            (memory if memory > compute else compute) + comm + self._decode_t0 + hw.per_sequence_overhead_s * batch_size
        )

    # --- contention -------------------------------------------------------------------------------

    def corun_speeds(self, prefill_share: float | None, decode_share: float | None) -> tuple[float, float]:
        """(prefill speed, decode speed) under the share-curve model, memoized; a phase that is None
        is idle, and the running one follows its own standalone curve (its speed for the idle one is 0).

        Shares are normalised when their caps overlap, then rounded to partition steps."""
        key = (prefill_share, decode_share)
        cached = self._corun_cache.get(key)
        if cached is None:
            c = self.contention
            if prefill_share is not None and decode_share is not None:
                a, b = contended_shares(prefill_share, decode_share)
                cached = c.speeds(self.effective_share(a), self.effective_share(b))
            elif prefill_share is not None:
                cached = (c.speeds(self.effective_share(prefill_share), None)[0], 0.0)
            elif decode_share is not None:
                cached = (0.0, c.decode_speed(self.effective_share(decode_share), None))
            else:
                raise ValueError("at least one phase must run")
            if len(self._corun_cache) >= _SHARE_CACHE_SIZE:
                self._corun_cache.clear()
            self._corun_cache[key] = cached
        return cached

    def prefill_batch_time(
        self,
        prompt_lens: Sequence[int],
        prefill_share: float,
        decode_share: float | None = None,
        prefix_lens: Sequence[int] | None = None,
    ) -> float:
        """`prefill_time` of the worker capped at `prefill_share` while a decode batch capped at
        `decode_share` runs beside it (None: prefill runs alone)."""
        c = self.contention
        if c.take_turns:
            share = contended_shares(prefill_share, decode_share)[0] if decode_share is not None else prefill_share
            return self.prefill_time(prompt_lens, share, prefix_lens)
        speed = self.corun_speeds(prefill_share, decode_share)[0]
        return self.prefill_time(prompt_lens, 1.0, prefix_lens) / speed

    def decode_batch_time(
        self, batch_size: int, kv_tokens: int, decode_share: float, prefill_share: float | None = None
    ) -> float:
        """`decode_step_time` of the worker capped at `decode_share` while a prefill batch capped at
        `prefill_share` runs beside it (None: decode runs alone)."""
        c = self.contention
        if c.take_turns:
            if prefill_share is None:
                return self.decode_step_time(batch_size, kv_tokens, decode_share)
            share = contended_shares(prefill_share, decode_share)[1]
            return self.decode_step_time(batch_size, kv_tokens, share, prefill_running=True)
        speed = self.corun_speeds(prefill_share, decode_share)[1]
        return self.decode_step_time(batch_size, kv_tokens, 1.0) / speed

    # --- lifecycle costs --------------------------------------------------------------------------

    def switch_cost(self) -> float:
        """Seconds for a standby prefill worker with a new share to come up (standby_swap mode).

        Process + device context start, model construction without weight load, IPC import of the
        resident weights and KV pool: estimated (no published measurement exists).
        """
        return self.hardware.worker_start_s + 0.005 * self.model.layers

    def restart_cost(self) -> float:
        """Seconds to relaunch the whole engine with a new split (restart mode): reload weights from a
        node-local cache, rebuild the KV pool, capture graphs. Excludes pod scheduling and image pull."""
        hw = self.hardware
        return hw.worker_start_s + self.weights_bytes() / (hw.weight_load_gbs * GB) + hw.graph_capture_s

    def __repr__(self) -> str:
        return f"LatencyModel({self.hardware.name!r}, {self.model.name!r}, tp={self.tp}, {self.contention.label()})"
