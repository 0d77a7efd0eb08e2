"""`sglang`: upstream SGLang 0.5 with PD-Multiplexing (`--enable-pdmux`), prefill and decode on CUDA
green-context streams with their own SM groups (sgl-project/sglang #7649, #7653, #11592).

The SM groups are built once at scheduler start from `--pdmux-config-path`, so a split change is a
restart: the agent writes the file from its split (semipd.agent.pdmux) and relaunches the engine.
The pod env carries the GPU's SM count and compute capability (from the node pool's hardware
profile) that the division needs. PD-Multiplexing requires `--chunked-prefill-size -1`,
`--disable-overlap-schedule`, no pipeline parallelism and no P/D disaggregation (SGLang 0.5.23
validation_hook.py), so the driver sets them and refuses user args that would undo them.
Metric names and buckets are SGLang 0.5.23's (sglang/srt/observability/metrics_collector.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from semipd.agent import pdmux
from semipd.agent.drivers import has_flag
from semipd.agent.split import Split
from semipd.engines import k8s
from semipd.engines.base import DriverError, EngineContext, EngineDriver
from semipd.engines.sglang import SGLANG_044_METRICS, launch_server_args
from semipd.perf import HARDWARE
from semipd.perf.resolve import hardware_profile

TTFT_BUCKETS = (
    0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100,
    0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0,
)  # fmt: skip
E2E_BUCKETS = (
    0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0,
    600.0, 1200.0, 1800.0, 2400.0,
)  # fmt: skip

SGLANG_05_METRICS = replace(
    SGLANG_044_METRICS,  # same series names; 0.5 changed the bucket edges and added the prompt histogram
    ttft_buckets=TTFT_BUCKETS,
    itl_buckets=ITL_BUCKETS,
    e2e_buckets=E2E_BUCKETS,
    extra={**SGLANG_044_METRICS.extra, "prompt_tokens_histogram": "sglang:prompt_tokens_histogram"},
)

COMPUTE_CAPABILITY = {"a100": "8.0", "a100-40gb": "8.0", "h100": "9.0", "h200": "9.0", "h20": "9.0"}
"""Compute capability per NVIDIA hardware profile (NVIDIA CUDA GPUs table)."""
PDMUX_FLAGS = ("--enable-pdmux", "--chunked-prefill-size", "-1", "--disable-overlap-schedule")
CONFLICTING_FLAGS = (
    "--chunked-prefill-size",
    "--pp-size",
    "--pipeline-parallel-size",
    "--disaggregation-mode",
    "--enable-two-batch-overlap",
    "--pdmux-config-path",
    "--sm-group-num",
)
"""User args that PD-Multiplexing rejects, or that the driver and agent own."""
BUCKET_FLAGS = ("--bucket-time-to-first-token", "--bucket-inter-token-latency", "--bucket-e2e-request-latency")


def gpu_facts(ctx: EngineContext) -> tuple[int, str]:
    """(SMs per GPU, compute capability) of the node pool's hardware profile."""
    name = hardware_profile(ctx.node_pool)
    if name not in COMPUTE_CAPABILITY:
        raise DriverError(f"node pool {ctx.node_pool.name}: no compute capability known for hardware {name!r}")
    return HARDWARE[name].compute_units, COMPUTE_CAPABILITY[name]


@dataclass(frozen=True)
class SglangPdmuxDriver(EngineDriver):
    def check(self, ctx: EngineContext) -> None:
        super().check(ctx)
        args = ctx.engine.args
        for flag in CONFLICTING_FLAGS:
            if has_flag(args, flag):
                raise DriverError(f"engine.args sets {flag}, which PD-Multiplexing forbids or the operator sets")
        for flag in BUCKET_FLAGS:
            if has_flag(args, flag):
                raise DriverError(
                    f"engine.args sets {flag}: the operator's quantile and SLO-attainment queries are built on "
                    "SGLang's default bucket edges; remove it"
                )
        sms, capability = gpu_facts(ctx)
        semi = ctx.spec.semi_pd
        split = Split(semi.initial_prefill_percent, semi.initial_decode_percent)
        try:
            pdmux.sm_division(split, sms, pdmux.parse_compute_capability(capability))
        except pdmux.PdmuxError as e:
            raise DriverError(f"node pool {ctx.node_pool.name}: {e}") from e

    def engine_command(self, ctx: EngineContext) -> list[str]:
        cmd = [*launch_server_args(ctx), "--enable-metrics", *PDMUX_FLAGS]
        if ctx.node_pool.kv_cache_tokens is not None:
            cmd += ["--max-total-tokens", str(ctx.node_pool.kv_cache_tokens)]
        return cmd

    def driver_env(self, ctx: EngineContext) -> list[dict[str, Any]]:
        sms, capability = gpu_facts(ctx)
        return [
            k8s.env_value(pdmux.SM_COUNT_ENV, str(sms)),
            k8s.env_value(pdmux.COMPUTE_CAPABILITY_ENV, capability),
        ]


SGLANG = SglangPdmuxDriver(kind="sglang", metrics=SGLANG_05_METRICS, health_path="/health")
