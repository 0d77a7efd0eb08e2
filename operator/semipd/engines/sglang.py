"""`sglang-semipd`: the Semi-PD SGLang fork (infinigence/Semi-PD `main`, SGLang 0.4.4).

The split is fixed at launch (SEMI_PD_{PREFILL,DECODE}_SM_PERCENTILE, MPS per process), so a change
restarts the engine. Metrics are SGLang 0.4.4's; decode SLOs use the inter-token histogram, not
`time_per_output_token_seconds`, which SGLang 0.4.4 observes as e2e / tokens (TTFT included).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from semipd.agent.drivers import SEMI_PD_DECODE_ENV, SEMI_PD_PREFILL_ENV
from semipd.engines import k8s
from semipd.engines.base import POD_IP, EngineContext, EngineDriver, model_location
from semipd.engines.promql import MetricSet

TTFT_BUCKETS = (0.1, 0.3, 0.5, 0.7, 0.9, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 120.0, 160.0)
ITL_BUCKETS = (
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040,
    0.050, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.0,
)  # fmt: skip
E2E_BUCKETS = (
    0.1, 0.2, 0.4, 0.8, 1.0, 2.0, 5.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 150.0, 200.0, 250.0, 300.0,
    350.0, 500.0, 1000.0,
)  # fmt: skip

SGLANG_044_METRICS = MetricSet(
    ttft="sglang:time_to_first_token_seconds",
    itl="sglang:inter_token_latency_seconds",
    e2e="sglang:e2e_request_latency_seconds",
    running="sglang:num_running_reqs",
    waiting="sglang:num_queue_reqs",
    kv_usage="sglang:token_usage",
    prompt_tokens="sglang:prompt_tokens_total",
    generation_tokens="sglang:generation_tokens_total",
    ttft_buckets=TTFT_BUCKETS,
    itl_buckets=ITL_BUCKETS,
    e2e_buckets=E2E_BUCKETS,
    extra={"requests_total": "sglang:num_requests_total", "cached_tokens": "sglang:cached_tokens_total"},
)

MEM_FRACTION_STATIC = "0.85"
"""Semi-PD README's launch value (the fork multiplies the default by 0.9 in semi-PD mode)."""


def launch_server_args(ctx: EngineContext) -> list[str]:
    """`sglang.launch_server` with what every SGLang flavour is told: model, name, address, TP, context, memory."""
    return [
        "python3", "-m", "sglang.launch_server",
        "--model-path", model_location(ctx.model),
        "--served-model-name", ctx.model.name,
        "--host", POD_IP,
        "--port", str(ctx.http_port),
        "--tp", str(ctx.tp),
        "--context-length", str(ctx.model.max_context_length),
        "--mem-fraction-static", MEM_FRACTION_STATIC,
    ]  # fmt: skip


@dataclass(frozen=True)
class SglangSemiPdDriver(EngineDriver):
    def engine_command(self, ctx: EngineContext) -> list[str]:
        return [
            *launch_server_args(ctx),
            "--disable-radix-cache",  # forced by --enable-semi-pd anyway
            "--enable-metrics",
            "--enable-semi-pd",
        ]  # fmt: skip

    def driver_env(self, ctx: EngineContext) -> list[dict[str, Any]]:
        # The agent sets these per launch from its split; the pod env carries the initial split so the
        # container spec shows what the engine starts with.
        semi = ctx.spec.semi_pd
        return [
            k8s.env_value(SEMI_PD_PREFILL_ENV, str(semi.initial_prefill_percent)),
            k8s.env_value(SEMI_PD_DECODE_ENV, str(semi.initial_decode_percent)),
        ]


SGLANG_SEMIPD = SglangSemiPdDriver(
    kind="sglang-semipd",
    metrics=SGLANG_044_METRICS,
    health_path="/health",
)
