"""The steps the harness times: model-shaped transformer layers with random weights (torch).

Shapes come from the project's own model profiles (semipd.perf.profiles.MODELS), so the harness and the
simulator agree on what "Llama-3-8B" is. A prefill step runs `layers` layers over a batch of new prompt
tokens with causal attention; a decode step runs them for one new token per sequence, with attention over
a KV cache of `batch x context` tokens per layer. Nothing is downloaded: weights are random.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from semipd.perf.profiles import MODELS


@dataclass(frozen=True, slots=True)
class LayerShape:
    name: str
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    ffn: int

    @classmethod
    def of(cls, model: str) -> LayerShape:
        m = MODELS[model]
        if m.is_moe or m.kv_replicated_across_tp:
            raise ValueError(f"{model}: the harness builds dense GQA layers only")
        return cls(model, m.hidden, m.q_heads, m.kv_heads, m.head_dim, m.ffn)

    @property
    def params(self) -> int:
        attn = self.hidden * self.head_dim * (2 * self.q_heads + 2 * self.kv_heads)
        return attn + 3 * self.hidden * self.ffn

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return 2 * self.kv_heads * self.head_dim * dtype_bytes


TINY = LayerShape("tiny", hidden=64, q_heads=4, kv_heads=2, head_dim=16, ffn=128)
"""For CPU tests: the same code paths (GQA, SwiGLU) in a few KiB."""


@dataclass(frozen=True, slots=True)
class PrefillConfig:
    sequences: int
    tokens: int
    """New tokens per sequence (no cached prefix)."""

    @property
    def label(self) -> str:
        return f"prefill-{self.sequences}x{self.tokens}"


@dataclass(frozen=True, slots=True)
class DecodeConfig:
    batch: int
    context: int
    """Tokens already in each sequence's KV cache."""

    @property
    def label(self) -> str:
        return f"decode-b{self.batch}-c{self.context}"


class Layer:
    """One Llama/Qwen-style block: RMSNorm, GQA attention, RMSNorm, SwiGLU FFN (no RoPE: its cost is small)."""

    def __init__(self, shape: LayerShape, device: torch.device, dtype: torch.dtype, gen: torch.Generator) -> None:
        self.shape = shape
        h, d = shape.hidden, shape.head_dim

        def w(rows: int, cols: int) -> torch.Tensor:
            # Drawn on the device: a Qwen3-32B layer is 0.5 G parameters, slow to draw on a CPU.
            return torch.randn(rows, cols, generator=gen, device=device, dtype=dtype).mul_(1.0 / math.sqrt(rows))

        # One fused QKV and one fused gate/up matrix, as serving engines lay them out.
        self.w_qkv = w(h, (shape.q_heads + 2 * shape.kv_heads) * d)
        self.w_o = w(shape.q_heads * d, h)
        self.w_gate_up = w(h, 2 * shape.ffn)
        self.w_down = w(shape.ffn, h)
        self.norm1 = torch.ones(h, device=device, dtype=dtype)
        self.norm2 = torch.ones(h, device=device, dtype=dtype)

    def _split_qkv(self, x: torch.Tensor, seqs: int, q_len: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        s = self.shape
        qkv = F.rms_norm(x, (s.hidden,), self.norm1) @ self.w_qkv
        q, k, v = qkv.split([s.q_heads * s.head_dim, s.kv_heads * s.head_dim, s.kv_heads * s.head_dim], dim=-1)
        q = q.view(seqs, q_len, s.q_heads, s.head_dim).transpose(1, 2)
        k = k.view(seqs, q_len, s.kv_heads, s.head_dim).transpose(1, 2)
        v = v.view(seqs, q_len, s.kv_heads, s.head_dim).transpose(1, 2)
        return q, k, v

    def _finish(self, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        s = self.shape
        x = x + attn.transpose(1, 2).reshape(x.shape[0], -1) @ self.w_o
        gate, up = (F.rms_norm(x, (s.hidden,), self.norm2) @ self.w_gate_up).chunk(2, dim=-1)
        return x + (F.silu(gate) * up) @ self.w_down

    def prefill(self, x: torch.Tensor, seqs: int) -> torch.Tensor:
        q, k, v = self._split_qkv(x, seqs, x.shape[0] // seqs)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self._finish(x, attn)

    def decode(self, x: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        # The new token's K/V would be appended to the cache; attending over the cache as it is reads
        # the same bytes and keeps the step's shapes fixed for graph replay.
        q, _, _ = self._split_qkv(x, x.shape[0], 1)
        attn = F.scaled_dot_product_attention(q, k_cache, v_cache, enable_gqa=True)
        return self._finish(x, attn)


class Steps:
    """The layers and buffers for one model; makes the zero-argument prefill and decode step callables."""

    def __init__(self, shape: LayerShape, layers: int, device: torch.device, dtype: torch.dtype, seed: int = 0) -> None:
        gen = torch.Generator(device=device).manual_seed(seed)
        self.shape, self.device, self.dtype = shape, device, dtype
        self.layers = [Layer(shape, device, dtype, gen) for _ in range(layers)]

    def prefill_step(self, cfg: PrefillConfig) -> Callable[[], torch.Tensor]:
        x0 = torch.randn(cfg.sequences * cfg.tokens, self.shape.hidden, device=self.device, dtype=self.dtype)

        def step() -> torch.Tensor:
            x = x0
            for layer in self.layers:
                x = layer.prefill(x, cfg.sequences)
            return x

        return step

    def decode_step(self, cfg: DecodeConfig) -> Callable[[], torch.Tensor]:
        s = self.shape
        x0 = torch.randn(cfg.batch, s.hidden, device=self.device, dtype=self.dtype)
        kv_shape = (cfg.batch, s.kv_heads, cfg.context, s.head_dim)
        # A distinct cache per layer, as in a real engine: the step reads batch x context x kv bytes per layer.
        caches = [
            (
                torch.randn(kv_shape, device=self.device, dtype=self.dtype),
                torch.randn(kv_shape, device=self.device, dtype=self.dtype),
            )
            for _ in self.layers
        ]

        def step() -> torch.Tensor:
            x = x0
            for layer, (k, v) in zip(self.layers, caches, strict=True):
                x = layer.decode(x, k, v)
            return x

        return step
