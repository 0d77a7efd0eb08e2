"""`mindie`: Huawei MindIE Service (MindIE-LLM) on Ascend.

MindIE is configured by a config.json (rendered here, delivered through a ConfigMap) rather than
flags. It exports un-prefixed metric names on a separate HTTPS metrics port only when
MIES_SERVICE_MONITOR_MODE=1. It has no prefilling/decode compute split. The daemon path, the
install prefix, the config nesting and the MIES_CONTAINER_IP override are unverified against a
real MindIE release (see docs/engines.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from semipd.engines import k8s
from semipd.engines.ascend import ascend_volumes
from semipd.engines.base import (
    POD_IP,
    DriverError,
    EngineContext,
    EngineDriver,
    EngineFile,
    model_location,
)
from semipd.engines.promql import MetricSet

MINDIE_HOME = "/usr/local/Ascend/mindie/latest/mindie-service"
DAEMON = f"{MINDIE_HOME}/bin/mindieservice_daemon"
CONFIG_PATH = f"{MINDIE_HOME}/conf/config.json"
MANAGEMENT_PORT = 1026
DEFAULT_METRICS_PORT = 1027
CACHE_BLOCK_SIZE = 128

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
E2E_BUCKETS = (1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)

MINDIE_METRICS = MetricSet(
    ttft="time_to_first_token_seconds",
    # Observed per decode step (time between tokens), so it is the inter-token latency.
    itl="time_per_output_token_seconds",
    e2e="e2e_request_latency_seconds",
    running="num_requests_running",
    waiting="num_requests_waiting",
    kv_usage="npu_cache_usage_perc",
    prompt_tokens="prompt_tokens_total",
    generation_tokens="generation_tokens_total",
    ttft_buckets=TTFT_BUCKETS,
    itl_buckets=ITL_BUCKETS,
    e2e_buckets=E2E_BUCKETS,
    scheme="https",
    extra={
        "requests_received_total": "request_received_total",
        "requests_failed_total": "request_failed_total",
        "prompt_tokens_histogram": "request_prompt_tokens",
    },
)


def _metrics_port(ctx: EngineContext) -> int:
    return ctx.engine.ports.metrics or DEFAULT_METRICS_PORT


def mindie_config(ctx: EngineContext) -> dict[str, Any]:
    """The config.json keys the reference documents, filled from the spec."""
    ports = {
        "http": ctx.http_port,
        "management": MANAGEMENT_PORT,
        "metrics": _metrics_port(ctx),
        "admin": ctx.engine.ports.admin,
    }
    if len(set(ports.values())) != len(ports):
        raise DriverError(f"mindie needs distinct ports, got {ports} (management is fixed at {MANAGEMENT_PORT})")
    max_len = ctx.model.max_context_length
    return {
        "ServerConfig": {
            # Literal loopback so nothing binds a wildcard; MIES_CONTAINER_IP (env) carries the pod IP.
            "ipAddress": "127.0.0.1",
            "port": ctx.http_port,
            "managementPort": MANAGEMENT_PORT,
            "metricsPort": ports["metrics"],
            "httpsEnabled": False,
            "openAiSupport": "vllm",
        },
        "BackendConfig": {
            "npuDeviceIds": [list(range(ctx.tp))],
            "modelInstanceNumber": 1,
            "multiNodesInferEnabled": False,
            "ModelDeployConfig": {
                "maxSeqLen": max_len,
                "maxInputTokenLen": max_len,
                "ModelConfig": [
                    {
                        "modelName": ctx.model.name,
                        "modelWeightPath": model_location(ctx.model, local_only=True),
                        "worldSize": ctx.tp,
                        "npuMemSize": -1,
                    }
                ],
            },
            "ScheduleConfig": {"cacheBlockSize": CACHE_BLOCK_SIZE, "maxPrefillTokens": max(8192, max_len)},
        },
    }


@dataclass(frozen=True)
class MindieDriver(EngineDriver):
    def engine_command(self, ctx: EngineContext) -> list[str]:
        return [DAEMON]

    def driver_env(self, ctx: EngineContext) -> list[dict[str, Any]]:
        return [
            k8s.env_value("MIES_SERVICE_MONITOR_MODE", "1"),
            k8s.env_value("MIES_CONTAINER_IP", POD_IP),
            k8s.env_value("MIES_CONTAINER_MANAGEMENT_IP", POD_IP),
        ]

    def files(self, ctx: EngineContext) -> list[EngineFile]:
        text = json.dumps(mindie_config(ctx), indent=2, sort_keys=True) + "\n"
        return [EngineFile("mindie-config.json", CONFIG_PATH, text)]

    def driver_volumes(self, ctx: EngineContext) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        return ascend_volumes(ctx)

    def metrics_port(self, ctx: EngineContext) -> int:
        return _metrics_port(ctx)

    def extra_ports(self, ctx: EngineContext) -> list[dict[str, Any]]:
        ports = [k8s.container_port("management", MANAGEMENT_PORT)]
        if ctx.engine.ports.metrics is None:
            ports.append(k8s.container_port("metrics", DEFAULT_METRICS_PORT))
        return ports


MINDIE = MindieDriver(
    kind="mindie",
    metrics=MINDIE_METRICS,
    health_path=None,  # no health path is documented; readiness is a TCP check of the API port
)
