"""`sim` and `sim-semipd`: the simulated semi-PD engine (`semipd sim-engine`), timed by semipd.perf.

`sim`: the agent starts the prefill workers (standby_swap). `sim-semipd`: the engine starts its own
from env at launch, as Semi-PD `main` does, so a split change is a drained restart. The hardware
profile comes from the node pool's GPU/NPU product label when it names one, else the vendor's
default; `engine.args` may override it (`--hardware h200`: later flags win).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from semipd.api.v1alpha1 import Architecture
from semipd.engines.base import (
    AGENT_RUN_DIR,
    POD_IP,
    DriverError,
    EngineContext,
    EngineDriver,
)
from semipd.engines.sglang import SGLANG_044_METRICS
from semipd.perf import LatencyModel, ModelFitError, resolve
from semipd.perf.resolve import hardware_profile

SIM_METRICS = replace(
    SGLANG_044_METRICS,
    extra={
        **SGLANG_044_METRICS.extra,
        "prefill_percent": "semipd_sim_prefill_share_ratio",
        "decode_percent": "semipd_sim_decode_share_ratio",
        "expert_tokens_total": "semipd_sim_expert_tokens_total",
        # Upstream SGLang's name (--collect-tokens-histogram); the Semi-PD fork (0.4.4) has none.
        "prompt_tokens_histogram": "sglang:prompt_tokens_histogram",
    },
)


def model_profile(ctx: EngineContext) -> str:
    try:
        return resolve.model_profile(ctx.model)
    except resolve.ProfileError as e:
        raise DriverError(str(e)) from e


@dataclass(frozen=True)
class SimDriver(EngineDriver):
    def check(self, ctx: EngineContext) -> None:
        super().check(ctx)
        try:
            LatencyModel.from_names(hardware_profile(ctx.node_pool), model_profile(ctx), ctx.tp)
        except ModelFitError as e:
            raise DriverError(f"node pool {ctx.node_pool.name}: {e}") from e

    def engine_command(self, ctx: EngineContext) -> list[str]:
        cmd = [
            "python3", "-m", "semipd", "sim-engine",
            "--role", "decode-owner",
            "--host", POD_IP,
            "--port", str(ctx.http_port),
            "--run-dir", AGENT_RUN_DIR,
            "--hardware", hardware_profile(ctx.node_pool),
            "--model", model_profile(ctx),
            "--tp", str(ctx.tp),
            "--served-model-name", ctx.model.name,
            "--context-length", str(ctx.model.max_context_length),
        ]  # fmt: skip
        if ctx.node_pool.kv_cache_tokens is not None:
            # The KV pool the operator plans with (status capacityTokens) is the one the engine has.
            cmd += ["--kv-capacity-tokens", str(ctx.node_pool.kv_cache_tokens)]
        experts = ctx.spec.placement.experts
        if ctx.model.architecture == Architecture.MOE and experts.enabled:
            # One replica is one EP group over its accelerators (the engine's default --ep-size is --tp).
            return [*cmd, "--ep-num-redundant-experts", str(experts.redundant_experts)]
        return cmd


SIM = SimDriver(
    kind="sim",
    metrics=SIM_METRICS,
    health_path="/health",
    startup_seconds=300,
)


@dataclass(frozen=True)
class SimSemiPdDriver(SimDriver):
    """The simulated engine as Semi-PD `main` runs: it starts its own prefill worker from env at launch."""

    def engine_command(self, ctx: EngineContext) -> list[str]:
        return [*super().engine_command(ctx), "--enable-semi-pd"]


SIM_SEMIPD = SimSemiPdDriver(
    kind="sim-semipd",
    metrics=SIM_METRICS,
    health_path="/health",
    startup_seconds=300,
)
