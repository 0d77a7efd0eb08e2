"""`vllm` (co-located baseline on NVIDIA) and `vllm-ascend` (the same CLI with the Ascend plugin).

Neither has a prefill/decode split: prefill and decode share one engine process. MoE expert
rebalancing uses vLLM's EPLB (`--enable-eplb --eplb-config`) and vllm-ascend's dynamic EPLB
(`--additional-config '{"eplb_config": ...}'`) when the spec enables expert placement.

KV-cache memory: with `nodePools[].kvCacheTokens` set the engine gets that size explicitly,
`--kv-cache-memory-bytes` from the model profile's KV bytes per token per device, and no
`--gpu-memory-utilization`: on vLLM's CPU backend that flag is a fraction of host memory, checked
at start only when no explicit size is given (vllm/v1/worker/cpu_worker.py), and 0.9 of a shared
machine is refused. Without a size, the GPU default 0.9 applies. A KV-sizing flag in `engine.args`
replaces ours.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from semipd.agent.drivers import has_flag
from semipd.api.v1alpha1 import Architecture
from semipd.engines import k8s
from semipd.engines.ascend import ascend_volumes
from semipd.engines.base import POD_IP, DriverError, EngineContext, EngineDriver, model_location
from semipd.engines.promql import MetricSet
from semipd.perf import LatencyModel, ModelFitError
from semipd.perf.resolve import hardware_profile

TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
    80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
E2E_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
    960.0, 1920.0, 7680.0,
)  # fmt: skip

VLLM_V1_METRICS = MetricSet(
    ttft="vllm:time_to_first_token_seconds",
    itl="vllm:inter_token_latency_seconds",
    e2e="vllm:e2e_request_latency_seconds",
    running="vllm:num_requests_running",
    waiting="vllm:num_requests_waiting",
    kv_usage="vllm:kv_cache_usage_perc",
    prompt_tokens="vllm:prompt_tokens_total",
    generation_tokens="vllm:generation_tokens_total",
    ttft_buckets=TTFT_BUCKETS,
    itl_buckets=ITL_BUCKETS,
    e2e_buckets=E2E_BUCKETS,
    extra={
        "preemptions_total": "vllm:num_preemptions_total",
        "prefix_cache_hits_total": "vllm:prefix_cache_hits_total",
        "prefix_cache_queries_total": "vllm:prefix_cache_queries_total",
        "prompt_tokens_histogram": "vllm:request_prompt_tokens",
    },
)

GPU_MEMORY_UTILIZATION = "0.9"
MEMORY_FLAGS = ("--gpu-memory-utilization", "--kv-cache-memory-bytes", "--num-gpu-blocks-override")
"""Flags that size vLLM's KV cache; one in `engine.args` replaces the driver's choice."""
BUCKET_FLAGS = ("--custom-histogram-buckets",)
"""Flags that move the histogram bucket edges our quantile and attainment queries are built on."""
ASCEND_SWIFT_BALANCER = 2
"""vllm-ascend eplb_policy_type 2 (SwiftBalancer), the one its guide recommends on Ascend."""


def _experts_enabled(ctx: EngineContext) -> bool:
    return ctx.model.architecture == Architecture.MOE and ctx.spec.placement.experts.enabled


def kv_cache_bytes_per_device(ctx: EngineContext, tokens: int) -> int | None:
    """Bytes one device needs for `tokens` tokens of KV cache, from `model.profile`; None without one."""
    if ctx.model.profile is None:
        return None
    try:
        model = LatencyModel.from_names(hardware_profile(ctx.node_pool), ctx.model.profile, ctx.tp)
    except (KeyError, ModelFitError) as e:
        raise DriverError(f"node pool {ctx.node_pool.name}: cannot size the KV cache from model.profile: {e}") from e
    return math.ceil(tokens * model.kv_bytes_per_token())


def memory_args(ctx: EngineContext) -> list[str]:
    """The KV-cache sizing flags (see the module docstring)."""
    if any(has_flag(ctx.engine.args, f) for f in MEMORY_FLAGS):
        return []
    tokens = ctx.node_pool.kv_cache_tokens
    if tokens is None:
        return ["--gpu-memory-utilization", GPU_MEMORY_UTILIZATION]
    size = kv_cache_bytes_per_device(ctx, tokens)
    if size is None:
        # --num-gpu-blocks-override would not do: the CPU backend still checks the memory fraction.
        raise DriverError(
            f"node pool {ctx.node_pool.name}: kvCacheTokens with engine vllm needs model.profile (KV bytes per "
            "token) to size the cache; set it, or pass --kv-cache-memory-bytes in engine.args"
        )
    return ["--kv-cache-memory-bytes", str(size)]


@dataclass(frozen=True)
class VllmDriver(EngineDriver):
    ascend: bool = False

    def check(self, ctx: EngineContext) -> None:
        super().check(ctx)
        for flag in BUCKET_FLAGS:
            if has_flag(ctx.engine.args, flag):
                raise DriverError(
                    f"engine.args sets {flag}: the operator's TTFT/ITL quantile and SLO-attainment queries "
                    "are built on vLLM's default bucket edges; remove it"
                )

    def engine_command(self, ctx: EngineContext) -> list[str]:
        cmd = [
            "vllm", "serve", model_location(ctx.model),
            "--served-model-name", ctx.model.name,
            "--host", POD_IP,
            "--port", str(ctx.http_port),
            "--tensor-parallel-size", str(ctx.tp),
            "--max-model-len", str(ctx.model.max_context_length),
            *memory_args(ctx),
        ]  # fmt: skip
        if _experts_enabled(ctx):
            redundant = ctx.spec.placement.experts.redundant_experts
            if self.ascend:
                eplb = {
                    "dynamic_eplb": True,
                    "num_redundant_experts": redundant,
                    "eplb_policy_type": ASCEND_SWIFT_BALANCER,
                }
                cmd += [
                    "--enable-expert-parallel",
                    "--additional-config",
                    json.dumps({"eplb_config": eplb}, separators=(",", ":")),
                ]
            else:
                cmd += [
                    "--enable-expert-parallel",
                    "--enable-eplb",
                    "--eplb-config",
                    json.dumps({"num_redundant_experts": redundant}, separators=(",", ":")),
                ]
        return cmd

    def driver_env(self, ctx: EngineContext) -> list[dict[str, Any]]:
        if not self.ascend:
            return []
        env = [k8s.env_value("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:True")]
        if _experts_enabled(ctx):
            env.append(k8s.env_value("DYNAMIC_EPLB", "true"))
        return env

    def driver_volumes(self, ctx: EngineContext) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        return ascend_volumes(ctx) if self.ascend else ([], [])


VLLM = VllmDriver(
    kind="vllm",
    metrics=VLLM_V1_METRICS,
    health_path="/health",
)

VLLM_ASCEND = VllmDriver(
    kind="vllm-ascend",
    # vllm-ascend exports the stock vllm: set on the API port.
    metrics=VLLM_V1_METRICS,
    health_path="/health",
    ascend=True,
)
