"""Engine drivers: pod parts against expected pod specs, capabilities, metric names and PromQL."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest

from semipd.agent import __main__ as agent_main
from semipd.agent.drivers import DRIVERS as AGENT_DRIVERS
from semipd.api.v1alpha1 import EngineKind, InferencePoolSpec
from semipd.engines import DRIVERS, DriverError, EngineContext, EngineDriver, get_driver
from semipd.engines.mindie import CONFIG_PATH, mindie_config
from semipd.engines.promql import le_label
from semipd.engines.wrapper import (
    agent_init_container,
    agent_liveness_probe,
    agent_port,
    agent_volumes,
    wrapped_command,
)
from semipd.perf.resolve import hardware_profile


def pool_spec(kind: str, accelerator: str = "nvidia", **extra: Any) -> InferencePoolSpec:
    doc: dict[str, Any] = {
        "model": {
            "name": "llama-8b",
            "source": "pvc://models/llama-3-8b",
            "profile": "llama-3-8b",
            "maxContextLength": 8192,
        },
        "engine": {"kind": kind, "image": "registry.local/engine:1"},
        "nodePools": [{"name": "pool", "accelerator": accelerator, "acceleratorsPerReplica": 2}],
        "slo": {"ttftP99": "2s", "itlP99": "80ms"},
        "semiPD": {"initialPrefillPercent": 60, "minPrefillPercent": 30},
    }
    for key, value in extra.items():
        doc[key] = {**doc.get(key, {}), **value} if isinstance(value, dict) else value
    return InferencePoolSpec.model_validate(doc)


def ctx_of(spec: InferencePoolSpec, **options: Any) -> EngineContext:
    return EngineContext.of(spec, "pool", **options)


def pod_from(driver: EngineDriver, ctx: EngineContext) -> dict[str, Any]:
    """A Pod assembled from the driver's parts and the wrapper (the Deployment builder's job, minimally)."""
    parts = driver.parts(ctx)
    agent_vols, agent_mounts = agent_volumes("pool-agent-token")
    container = {
        "name": "engine",
        "image": ctx.engine.image or "operator:dev",
        "command": wrapped_command(driver, ctx),
        "env": parts.env,
        "ports": [*parts.ports, agent_port(ctx)],
        "readinessProbe": parts.readiness_probe,
        "startupProbe": parts.startup_probe,
        "livenessProbe": agent_liveness_probe(ctx),
        "volumeMounts": [*parts.volume_mounts, *agent_mounts],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "initContainers": [agent_init_container("operator:dev")],
            "containers": [container],
            "volumes": [*parts.volumes, *agent_vols],
        },
    }


# --- registry and capabilities --------------------------------------------------------------------


def test_every_engine_kind_has_a_driver() -> None:
    assert set(DRIVERS) == {k.value for k in EngineKind}
    for kind in EngineKind:
        assert get_driver(kind).kind == kind.value
    with pytest.raises(KeyError, match="sglang-semipd"):
        get_driver("tgi")


@pytest.mark.parametrize(
    ("kind", "mode", "mps", "vendors"),
    [
        ("sglang-semipd", "restart", True, {"nvidia"}),
        ("vllm", "none", False, {"nvidia"}),
        ("vllm-ascend", "none", False, {"ascend"}),
        ("mindie", "none", False, {"ascend"}),
        ("sim", "standby_swap", False, {"nvidia", "ascend"}),
    ],
)
def test_driver_capabilities_agree_with_the_in_pod_agent(kind: str, mode: str, mps: bool, vendors: set[str]) -> None:
    driver = get_driver(kind)
    caps = driver.capabilities
    assert caps.switch_mode == mode
    assert caps.accelerators == vendors
    assert driver.needs_mps is mps
    # The operator's table and the agent's driver must not disagree on how (or whether) a split changes.
    agent = AGENT_DRIVERS[kind]
    assert caps.switch_mode == agent.switch_mode
    assert caps.supports_split == agent.supports_split
    assert bool(driver.split_unsupported_reason) is (not caps.supports_split)


# --- pod parts vs expected pod specs ----------------------------------------------------------------


def test_sglang_semipd_parts() -> None:
    ctx = ctx_of(pool_spec("sglang-semipd"))
    parts = get_driver("sglang-semipd").parts(ctx)
    assert parts.command == [
        "python3", "-m", "sglang.launch_server", "--model-path", "/models/models/llama-3-8b",
        "--served-model-name", "llama-8b", "--host", "$(POD_IP)", "--port", "8000", "--tp", "2",
        "--context-length", "8192", "--mem-fraction-static", "0.85", "--disable-radix-cache",
        "--enable-metrics", "--enable-semi-pd",
    ]  # fmt: skip
    assert parts.env == [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "SEMI_PD_PREFILL_SM_PERCENTILE", "value": "60"},
        {"name": "SEMI_PD_DECODE_SM_PERCENTILE", "value": "50"},
    ]
    assert parts.ports == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    assert parts.readiness_probe == {
        "httpGet": {"path": "/health", "port": 8000, "scheme": "HTTP"},
        "periodSeconds": 5, "failureThreshold": 3, "timeoutSeconds": 2,
    }  # fmt: skip
    assert parts.startup_probe["failureThreshold"] * parts.startup_probe["periodSeconds"] == 900
    assert parts.volumes == [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    assert parts.volume_mounts == [{"name": "dshm", "mountPath": "/dev/shm"}]
    assert (parts.metrics_port, parts.metrics_path, parts.metrics_scheme) == (8000, "/metrics", "http")


def test_wrapped_command_puts_the_agent_in_front() -> None:
    ctx = ctx_of(pool_spec("sglang-semipd", engine={"args": ["--chunked-prefill-size", "4096"]}))
    cmd = wrapped_command(get_driver("sglang-semipd"), ctx)
    sep = cmd.index("--")
    assert cmd[:sep] == [
        "python3", "/semipd/agent.pyz", "--driver", "sglang-semipd", "--admin-port", "9090",
        "--token-file", "/var/run/semipd/token", "--run-dir", "/semipd/run", "--mps", "auto",
        "--prefill-percent", "60", "--decode-percent", "50", "--prefill-min", "30", "--prefill-max", "100",
            "--decode-min", "20", "--decode-max", "100",
    ]  # fmt: skip
    assert cmd[sep + 1 : sep + 4] == ["python3", "-m", "sglang.launch_server"]
    assert cmd[-2:] == ["--chunked-prefill-size", "4096"]  # user args last, so they win


def test_engines_without_a_split_get_no_split_flags() -> None:
    cmd = wrapped_command(get_driver("vllm"), ctx_of(pool_spec("vllm")))
    assert "--prefill-percent" not in cmd
    assert cmd[cmd.index("--mps") + 1] == "off"


@pytest.mark.parametrize(("kind", "accelerator"), [
    ("sglang-semipd", "nvidia"), ("vllm", "nvidia"), ("vllm-ascend", "ascend"), ("mindie", "ascend"),
    ("sim", "nvidia"), ("sim", "ascend"),
])  # fmt: skip
def test_assembled_pod_is_a_valid_kubernetes_pod_the_real_agent_accepts(
    kind: str, accelerator: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = pool_spec(kind, accelerator, model={"profile": "qwen3-30b-a3b"} if accelerator == "ascend" else {})
    ctx = ctx_of(spec)
    driver = get_driver(kind)
    pod = pod_from(driver, ctx)
    kubernetes_validate.validate(pod, "1.35", strict=True)
    # Kubernetes expands $(POD_IP); then the agent's own parser and driver checks must accept the command.
    monkeypatch.setenv("POD_IP", "127.0.0.5")
    argv = [a.replace("$(POD_IP)", "127.0.0.5") for a in pod["spec"]["containers"][0]["command"][2:]]
    agent_argv, engine_argv = agent_main.split_argv(argv)
    ns = agent_main.build_parser().parse_args(agent_argv)
    settings, host = agent_main.settings_from_args(ns, engine_argv)
    assert host == "127.0.0.5"
    assert settings.driver.kind == kind
    if driver.capabilities.supports_split:
        assert (settings.initial.prefill_percent, settings.initial.decode_percent) == (60, 50)
    if driver.health_path is not None:
        assert settings.health is not None
        assert (settings.health.host, settings.health.port, settings.health.path) == (
            "127.0.0.5",
            8000,
            driver.health_path,
        )
    mounts = {m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert {"/semipd", "/var/run/semipd", "/dev/shm"} <= mounts


def test_vllm_moe_with_expert_placement_enables_eplb() -> None:
    spec = pool_spec(
        "vllm",
        model={
            "architecture": "moe",
            "experts": 128,
            "expertsPerToken": 8,
            "profile": "qwen3-30b-a3b",
            "source": "hf://Qwen/Qwen3-30B-A3B",
        },
        placement={"experts": {"enabled": True, "redundantExperts": 16}},
    )
    parts = get_driver("vllm").parts(ctx_of(spec))
    assert parts.command == [
        "vllm", "serve", "Qwen/Qwen3-30B-A3B", "--served-model-name", "llama-8b", "--host", "$(POD_IP)",
        "--port", "8000", "--tensor-parallel-size", "2", "--max-model-len", "8192",
        "--gpu-memory-utilization", "0.9", "--enable-expert-parallel", "--enable-eplb",
        "--eplb-config", '{"num_redundant_experts":16}',
    ]  # fmt: skip
    dense = get_driver("vllm").parts(ctx_of(pool_spec("vllm")))
    assert "--enable-eplb" not in dense.command


def test_vllm_ascend_adds_npu_env_mounts_and_dynamic_eplb() -> None:
    spec = pool_spec(
        "vllm-ascend",
        "ascend",
        model={"architecture": "moe", "experts": 128, "expertsPerToken": 8, "profile": "qwen3-30b-a3b"},
        placement={"experts": {"enabled": True, "redundantExperts": 8}},
    )
    parts = get_driver("vllm-ascend").parts(ctx_of(spec))
    extra = parts.command[parts.command.index("--additional-config") + 1]
    assert json.loads(extra) == {
        "eplb_config": {"dynamic_eplb": True, "num_redundant_experts": 8, "eplb_policy_type": 2}
    }
    env = {e["name"]: e.get("value") for e in parts.env}
    assert env["PYTORCH_NPU_ALLOC_CONF"] == "expandable_segments:True"
    assert env["DYNAMIC_EPLB"] == "true"
    assert {
        "name": "ascend-driver-lib64",
        "hostPath": {"path": "/usr/local/Ascend/driver/lib64", "type": "Directory"},
    } in parts.volumes
    assert {"name": "ascend-npu-smi", "mountPath": "/usr/local/bin/npu-smi", "readOnly": True} in parts.volume_mounts
    injected = get_driver("vllm-ascend").parts(ctx_of(spec, ascend_runtime_injects_mounts=True))
    assert [v["name"] for v in injected.volumes] == ["dshm"]


def test_mindie_renders_config_json_and_https_metrics() -> None:
    spec = pool_spec("mindie", "ascend", model={"source": "file:///weights/llama"})
    ctx = ctx_of(spec, engine_config_map="chat-pool-engine")
    parts = get_driver("mindie").parts(ctx)
    assert parts.command == ["/usr/local/Ascend/mindie/latest/mindie-service/bin/mindieservice_daemon"]
    assert len(parts.files) == 1
    cfg = json.loads(parts.files[0].content)
    assert cfg == mindie_config(ctx)
    assert cfg["ServerConfig"]["port"] == 8000
    assert cfg["ServerConfig"]["metricsPort"] == 1027
    assert cfg["ServerConfig"]["ipAddress"] == "127.0.0.1"
    model_cfg = cfg["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]
    assert model_cfg == {"modelName": "llama-8b", "modelWeightPath": "/weights/llama", "worldSize": 2, "npuMemSize": -1}
    assert cfg["BackendConfig"]["npuDeviceIds"] == [[0, 1]]
    assert {"name": "engine-config", "configMap": {"name": "chat-pool-engine"}} in parts.volumes
    assert {
        "name": "engine-config",
        "mountPath": CONFIG_PATH,
        "subPath": "mindie-config.json",
        "readOnly": True,
    } in parts.volume_mounts
    env = {e["name"]: e.get("value") for e in parts.env}
    assert env["MIES_SERVICE_MONITOR_MODE"] == "1"
    assert env["MIES_CONTAINER_MANAGEMENT_IP"] == "$(POD_IP)"
    assert (parts.metrics_port, parts.metrics_scheme) == (1027, "https")
    assert "tcpSocket" in parts.readiness_probe
    assert [p["containerPort"] for p in parts.ports] == [8000, 1026, 1027]


def test_mindie_refuses_hub_weights_and_port_clashes() -> None:
    with pytest.raises(DriverError, match="local weights"):
        get_driver("mindie").parts(ctx_of(pool_spec("mindie", "ascend", model={"source": "hf://a/b"})))
    clash = pool_spec("mindie", "ascend", engine={"ports": {"http": 1026}})
    with pytest.raises(DriverError, match="distinct ports"):
        get_driver("mindie").parts(ctx_of(clash))


def test_sim_driver_picks_profiles_and_checks_fit() -> None:
    ctx = ctx_of(pool_spec("sim"))
    parts = get_driver("sim").parts(ctx)
    flags = dict(zip(parts.command[4::2], parts.command[5::2], strict=False))
    assert flags["--role"] == "decode-owner"
    assert flags["--hardware"] == "h100"
    assert flags["--model"] == "llama-3-8b"
    assert flags["--tp"] == "2"
    assert flags["--run-dir"] == "/semipd/run"
    with pytest.raises(DriverError, match="not a latency-model profile"):
        get_driver("sim").parts(ctx_of(pool_spec("sim", model={"profile": "gpt-9"})))
    big = pool_spec("sim", model={"profile": "deepseek-v3"})
    with pytest.raises(DriverError, match="deepseek-v3 needs"):
        get_driver("sim").parts(ctx_of(big))
    assert "--kv-capacity-tokens" not in parts.command
    sized = pool_spec("sim", nodePools=[{"name": "pool", "accelerator": "nvidia", "kvCacheTokens": 123456}])
    command = get_driver("sim").parts(ctx_of(sized)).command
    assert command[command.index("--kv-capacity-tokens") + 1] == "123456"  # the KV pool the operator plans with


@pytest.mark.parametrize(("selector", "accelerator", "want"), [
    ({"nvidia.com/gpu.product": "NVIDIA-H200"}, "nvidia", "h200"),
    ({"nvidia.com/gpu.product": "NVIDIA-H20"}, "nvidia", "h20"),
    ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}, "nvidia", "a100-40gb"),
    ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}, "nvidia", "a100"),
    ({}, "nvidia", "h100"),
    ({"node.kubernetes.io/npu.chip.name": "910B4"}, "ascend", "ascend-910b4"),
    ({}, "ascend", "ascend-910b3"),
])  # fmt: skip
def test_sim_hardware_from_node_pool_labels(selector: dict[str, str], accelerator: str, want: str) -> None:
    spec = pool_spec(
        "sim", accelerator, nodePools=[{"name": "pool", "accelerator": accelerator, "nodeSelector": selector}]
    )
    assert hardware_profile(spec.node_pool("pool")) == want


def test_engines_refuse_the_wrong_accelerator() -> None:
    with pytest.raises(DriverError, match="does not run on ascend"):
        get_driver("vllm").parts(ctx_of(pool_spec("vllm", "ascend")))
    with pytest.raises(DriverError, match="does not run on nvidia"):
        get_driver("mindie").parts(ctx_of(pool_spec("mindie", "nvidia")))


def test_user_env_overrides_driver_env_and_secrets_are_referenced() -> None:
    spec = pool_spec("sglang-semipd", engine={"env": [
        {"name": "SEMI_PD_PREFILL_SM_PERCENTILE", "value": "90"},
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
    ]})  # fmt: skip
    env = get_driver("sglang-semipd").parts(ctx_of(spec)).env
    assert [e["name"] for e in env] == [
        "POD_IP",
        "SEMI_PD_PREFILL_SM_PERCENTILE",
        "SEMI_PD_DECODE_SM_PERCENTILE",
        "HF_TOKEN",
    ]
    assert env[1] == {"name": "SEMI_PD_PREFILL_SM_PERCENTILE", "value": "90"}
    assert env[3] == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}


def test_node_pool_engine_override_switches_driver_inputs() -> None:
    spec = pool_spec(
        "sglang-semipd",
        nodePools=[
            {"name": "pool", "accelerator": "ascend", "engine": {"kind": "vllm-ascend", "args": ["--enforce-eager"]}}
        ],
    )
    ctx = ctx_of(spec)
    assert ctx.engine.kind == EngineKind.VLLM_ASCEND
    parts = get_driver(ctx.engine.kind).parts(ctx)
    assert parts.command[:2] == ["vllm", "serve"]
    assert parts.command[-1] == "--enforce-eager"


# --- metrics and PromQL -----------------------------------------------------------------------------


def test_metric_names_per_engine() -> None:
    sg, vl, mi, sim = (get_driver(k).metrics for k in ("sglang-semipd", "vllm", "mindie", "sim"))
    assert (sg.ttft, sg.itl) == ("sglang:time_to_first_token_seconds", "sglang:inter_token_latency_seconds")
    assert "time_per_output_token" not in sg.itl  # the 0.4.4 TPOT histogram includes TTFT
    assert (vl.ttft, vl.itl, vl.kv_usage) == (
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:kv_cache_usage_perc",
    )
    assert get_driver("vllm-ascend").metrics == vl
    assert (mi.ttft, mi.itl, mi.kv_usage) == (
        "time_to_first_token_seconds",
        "time_per_output_token_seconds",
        "npu_cache_usage_perc",
    )
    assert sim.ttft == sg.ttft
    assert sim.extra["prefill_percent"] == "semipd_sim_prefill_share_ratio"
    assert vl.itl_buckets[0] == 0.01


def test_sim_engine_exports_the_sglang_buckets_the_driver_declares() -> None:
    from semipd.sim.engine import metrics as sim_metrics

    sg = get_driver("sglang-semipd").metrics
    assert tuple(map(float, sim_metrics.TTFT_BUCKETS)) == sg.ttft_buckets
    assert tuple(map(float, sim_metrics.ITL_BUCKETS)) == sg.itl_buckets
    assert tuple(map(float, sim_metrics.E2E_BUCKETS)) == sg.e2e_buckets


def test_promql_quantiles_and_attainment() -> None:
    m = get_driver("sglang-semipd").metrics
    assert m.ttft_quantile(0.99, "1m", by=("pod",), selector='namespace="ml"') == (
        "histogram_quantile(0.99, sum by (le, pod) "
        '(rate(sglang:time_to_first_token_seconds_bucket{namespace="ml"}[1m])))'
    )
    assert m.itl_quantile() == (
        "histogram_quantile(0.99, sum by (le) (rate(sglang:inter_token_latency_seconds_bucket[1m])))"
    )
    # 80 ms is not an SGLang ITL bound: round down to 75 ms rather than over-claim attainment.
    assert m.itl_attainment(0.08, "5m", selector='pod="p"') == (
        'sum (rate(sglang:inter_token_latency_seconds_bucket{pod="p",le="0.075"}[5m])) / '
        'sum (rate(sglang:inter_token_latency_seconds_count{pod="p"}[5m]))'
    )
    assert 'le="1.0"' in m.ttft_attainment(1.0)
    assert m.request_rate("2m", by=("pod",)) == "sum by (pod) (rate(sglang:e2e_request_latency_seconds_count[2m]))"
    assert m.kv_usage_max(by=("pod",)) == "max by (pod) (sglang:token_usage)"
    assert m.queue_length() == "sum (sglang:num_queue_reqs)"
    assert m.token_rates()[1] == "sum (rate(sglang:generation_tokens_total[1m]))"
    with pytest.raises(ValueError, match="smallest bucket"):
        m.ttft_attainment(0.05)
    with pytest.raises(ValueError, match="range"):
        m.ttft_quantile(window="1 minute")
    with pytest.raises(ValueError, match="quantile"):
        m.ttft_quantile(q=1.5)


def test_le_labels_match_prometheus_client_rendering() -> None:
    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    reg = CollectorRegistry()
    buckets = get_driver("sglang-semipd").metrics.itl_buckets
    Histogram("x", "x", buckets=buckets, registry=reg).observe(0.01)
    text = generate_latest(reg).decode()
    for b in buckets:
        assert f'x_bucket{{le="{le_label(b)}"}}' in text


def test_prompt_length_histograms_per_engine() -> None:
    assert get_driver("vllm").metrics.prompt_length_buckets("30s", selector='pod="p"') == (
        'sum by (le) (rate(vllm:request_prompt_tokens_bucket{pod="p"}[30s]))'
    )
    assert (
        get_driver("mindie").metrics.prompt_length_buckets() == "sum by (le) (rate(request_prompt_tokens_bucket[1m]))"
    )
    assert get_driver("sim").metrics.prompt_length_buckets() == (
        "sum by (le) (rate(sglang:prompt_tokens_histogram_bucket[1m]))"
    )
    # The Semi-PD fork (SGLang 0.4.4) exports no prompt-length histogram: unknown, never guessed.
    assert get_driver("sglang-semipd").metrics.prompt_length_buckets() is None
