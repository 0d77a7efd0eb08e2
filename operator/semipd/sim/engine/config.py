"""Command line and configuration of the simulated engine (both roles share one flag set).

Shares resolve like the real engine's environment: an explicit flag, else the MPS client percentage
(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), else Semi-PD's SEMI_PD_{PREFILL,DECODE}_SM_PERCENTILE, else the
Semi-PD defaults (80 prefill, 100 decode).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from semipd.agent.drivers import MPS_PERCENT_ENV, SEMI_PD_DECODE_ENV, SEMI_PD_PREFILL_ENV
from semipd.agent.runpaths import RUN_DIR_ENV

DECODE_OWNER = "decode-owner"
PREFILL_WORKER = "prefill-worker"
WILDCARD_HOSTS = ("0.0.0.0", "::", "")
DEFAULT_PREFILL_PERCENT = 80
DEFAULT_DECODE_PERCENT = 100


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class EngineConfig:
    role: str
    host: str
    port: int
    hardware: str
    model: str
    tp: int
    served_model_name: str
    run_dir: str
    speedup: float
    max_running: int
    chunked_prefill_size: int | None
    context_length: int | None
    default_max_tokens: int
    kv_capacity_tokens: int | None
    load_time: float | None
    worker_id: int
    prefill_percent: int
    decode_percent: int
    enable_semi_pd: bool
    expert_skew: float
    expert_seed: int
    ep_size: int | None
    redundant_experts: int
    drain_timeout: float
    attach_timeout: float
    metrics_clock: str
    log_level: str

    def worker_argv(self, worker_id: int, percent: int) -> list[str]:
        """Flags for a prefill worker attached to this decode owner (used by --enable-semi-pd)."""
        return [
            "--role", PREFILL_WORKER,
            "--worker-id", str(worker_id),
            "--prefill-percent", str(percent),
            "--run-dir", self.run_dir,
            "--hardware", self.hardware,
            "--model", self.model,
            "--tp", str(self.tp),
            "--speedup", repr(self.speedup),
            "--attach-timeout", repr(self.attach_timeout),
            "--log-level", self.log_level,
        ]  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="semipd sim-engine", description="Simulated semi-PD engine process.")
    p.add_argument("--role", required=True, choices=(DECODE_OWNER, PREFILL_WORKER))
    p.add_argument("--host", default="127.0.0.1", help="address to serve the OpenAI API on (never a wildcard)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--hardware", default="h100", help="hardware profile key (semipd.perf.HARDWARE)")
    p.add_argument("--model", default="llama-3-8b", help="model profile key (semipd.perf.MODELS)")
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--served-model-name", default=None, help="model name in the API (default: --model)")
    p.add_argument("--run-dir", default=None, help=f"dir for the unix sockets (default ${RUN_DIR_ENV})")
    p.add_argument("--speedup", type=float, default=1.0, help="divide every model time by this factor")
    p.add_argument("--max-running", type=int, default=256, help="max requests in prefill + decode")
    p.add_argument("--chunked-prefill-size", type=int, default=None, help="prefill batch token budget")
    p.add_argument("--context-length", type=int, default=None, help="default: the model's max context")
    p.add_argument("--default-max-tokens", type=int, default=128)
    p.add_argument("--kv-capacity-tokens", type=int, default=None, help="override the model's KV capacity")
    p.add_argument(
        "--load-time",
        type=float,
        default=None,
        help="decode owner start-up in model seconds (default: the model's restart cost)",
    )
    p.add_argument("--worker-id", type=int, default=0)
    p.add_argument("--prefill-percent", type=int, default=None)
    p.add_argument("--decode-percent", type=int, default=None)
    p.add_argument(
        "--enable-semi-pd",
        action="store_true",
        help="decode owner starts its own prefill worker from SEMI_PD_PREFILL_SM_PERCENTILE "
        "(the Semi-PD `main` layout, split fixed at launch)",
    )
    p.add_argument("--expert-skew", type=float, default=1.0, help="Zipf exponent of expert popularity")
    p.add_argument("--expert-seed", type=int, default=0)
    p.add_argument("--ep-size", type=int, default=None, help="expert-parallel devices (default: --tp)")
    p.add_argument(
        "--ep-num-redundant-experts", type=int, default=0, help="extra physical expert slots (as SGLang's flag)"
    )
    p.add_argument("--drain-timeout", type=float, default=30.0, help="s to finish in-flight requests on SIGTERM")
    p.add_argument("--attach-timeout", type=float, default=60.0, help="prefill worker: s to reach the owner")
    p.add_argument(
        "--metrics-clock",
        choices=("model", "wall"),
        default="model",
        help="latency metrics in model seconds (wall x speedup) or wall seconds",
    )
    p.add_argument("--log-level", default="INFO")
    return p  # fmt: skip


def _percent_from(flag: int | None, env: Mapping[str, str], names: Sequence[str], default: int) -> int:
    if flag is not None:
        value = flag
    else:
        raw = next((env[n] for n in names if env.get(n)), None)
        try:
            value = int(raw) if raw is not None else default
        except ValueError as e:
            raise ConfigError(f"bad share {raw!r} in {'/'.join(names)}") from e
    if not 1 <= value <= 100:
        raise ConfigError(f"share {value} must be within 1..100")
    return value


def parse_config(argv: Sequence[str], env: Mapping[str, str] | None = None) -> EngineConfig:
    environ = os.environ if env is None else env
    ns = build_parser().parse_args(list(argv))
    if ns.host in WILDCARD_HOSTS:
        raise ConfigError(f"refusing to bind wildcard address {ns.host!r}; give a specific (pod or loopback) IP")
    run_dir = ns.run_dir or environ.get(RUN_DIR_ENV)
    if not run_dir:
        raise ConfigError(f"--run-dir or ${RUN_DIR_ENV} is required")
    if ns.speedup <= 0:
        raise ConfigError("--speedup must be > 0")
    if ns.tp < 1 or ns.max_running < 1 or ns.default_max_tokens < 1:
        raise ConfigError("--tp, --max-running and --default-max-tokens must be >= 1")
    if (ns.ep_size is not None and ns.ep_size < 1) or ns.ep_num_redundant_experts < 0:
        raise ConfigError("--ep-size must be >= 1 and --ep-num-redundant-experts >= 0")
    prefill = _percent_from(
        ns.prefill_percent, environ, (MPS_PERCENT_ENV, SEMI_PD_PREFILL_ENV), DEFAULT_PREFILL_PERCENT
    )
    if ns.role == DECODE_OWNER:
        decode_names: tuple[str, ...] = (
            (SEMI_PD_DECODE_ENV,) if ns.enable_semi_pd else (MPS_PERCENT_ENV, SEMI_PD_DECODE_ENV)
        )
        prefill = _percent_from(ns.prefill_percent, environ, (SEMI_PD_PREFILL_ENV,), DEFAULT_PREFILL_PERCENT)
    else:
        decode_names = (SEMI_PD_DECODE_ENV,)
    decode = _percent_from(ns.decode_percent, environ, decode_names, DEFAULT_DECODE_PERCENT)
    return EngineConfig(
        role=ns.role,
        host=ns.host,
        port=ns.port,
        hardware=ns.hardware,
        model=ns.model,
        tp=ns.tp,
        served_model_name=ns.served_model_name or ns.model,
        run_dir=run_dir,
        speedup=ns.speedup,
        max_running=ns.max_running,
        chunked_prefill_size=ns.chunked_prefill_size,
        context_length=ns.context_length,
        default_max_tokens=ns.default_max_tokens,
        kv_capacity_tokens=ns.kv_capacity_tokens,
        load_time=ns.load_time,
        worker_id=ns.worker_id,
        prefill_percent=prefill,
        decode_percent=decode,
        enable_semi_pd=ns.enable_semi_pd,
        expert_skew=ns.expert_skew,
        expert_seed=ns.expert_seed,
        ep_size=ns.ep_size,
        redundant_experts=ns.ep_num_redundant_experts,
        drain_timeout=ns.drain_timeout,
        attach_timeout=ns.attach_timeout,
        metrics_clock=ns.metrics_clock,
        log_level=ns.log_level,
    )
