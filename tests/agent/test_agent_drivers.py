"""Per-engine launch mechanics (pure): commands, env, health endpoints, capability flags."""

from __future__ import annotations

import pytest

from semipd.agent.drivers import DRIVERS, NONE, RESTART, STANDBY_SWAP, HealthEndpoint, flag_value
from semipd.agent.split import Split

SIM_CMD = ["semipd", "sim-engine", "--role", "decode-owner", "--host", "10.1.2.3", "--port", "8000", "--speedup", "5"]


def test_sim_prefill_worker_command_and_env() -> None:
    launch = DRIVERS["sim"].prefill_worker_launch(SIM_CMD, 7, 65, "/semipd/run", {"PATH": "/bin"})
    assert launch.argv == (
        "semipd", "sim-engine", "--role", "prefill-worker", "--host", "10.1.2.3", "--port", "8000",
        "--speedup", "5", "--worker-id", "7", "--prefill-percent", "65",
    )  # fmt: skip
    assert launch.env == {
        "PATH": "/bin",
        "SEMIPD_RUN_DIR": "/semipd/run",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "65",
        "SEMI_PD_PREFILL_SM_PERCENTILE": "65",
    }


def test_sim_role_equals_form_is_rewritten() -> None:
    cmd = ["semipd", "sim-engine", "--role=decode-owner"]
    assert "--role=prefill-worker" in DRIVERS["sim"].prefill_worker_launch(cmd, 0, 50, "/r", {}).argv


def test_sim_decode_owner_env_carries_decode_share() -> None:
    launch = DRIVERS["sim"].engine_launch(SIM_CMD, Split(40, 90), "/semipd/run", {})
    assert launch.argv == tuple(SIM_CMD)
    assert launch.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "90"
    assert launch.env["SEMI_PD_DECODE_SM_PERCENTILE"] == "90"
    assert "SEMI_PD_PREFILL_SM_PERCENTILE" not in launch.env


@pytest.mark.parametrize(
    ("cmd", "problem"),
    [
        ([], "no engine command"),
        (["semipd", "sim-engine", "--role", "prefill-worker"], "--role decode-owner"),
        ([*SIM_CMD, "--prefill-percent", "50"], "--prefill-percent is set by the agent"),
        ([*SIM_CMD, "--decode-percent=50"], "--decode-percent is set by the agent"),
        ([*SIM_CMD, "--run-dir", "/elsewhere"], "differs from the agent's --run-dir"),
    ],
)
def test_sim_command_problems(cmd: list[str], problem: str) -> None:
    assert any(problem in p for p in DRIVERS["sim"].check_command(cmd, "/semipd/run"))


def test_sim_command_with_matching_run_dir_is_fine() -> None:
    assert DRIVERS["sim"].check_command([*SIM_CMD, "--run-dir", "/semipd/run/"], "/semipd/run") == []


def test_sglang_semipd_fixes_split_in_env_and_enables_semi_pd() -> None:
    cmd = ["python3", "-m", "sglang.launch_server", "--model-path", "/m", "--port", "30001"]
    launch = DRIVERS["sglang-semipd"].engine_launch(cmd, Split(70, 100), "/semipd/run", {"A": "1"})
    assert launch.argv == (*cmd, "--enable-semi-pd")
    assert launch.env["SEMI_PD_PREFILL_SM_PERCENTILE"] == "70"
    assert launch.env["SEMI_PD_DECODE_SM_PERCENTILE"] == "100"
    assert launch.env["A"] == "1"
    again = DRIVERS["sglang-semipd"].engine_launch(launch.argv, Split(70, 100), "/r", {})
    assert again.argv.count("--enable-semi-pd") == 1
    assert DRIVERS["sglang-semipd"].health_endpoint(cmd) == HealthEndpoint("127.0.0.1", 30001, "/health")
    assert DRIVERS["sglang-semipd"].needs_mps


def test_switch_modes_and_support() -> None:
    assert DRIVERS["sim"].switch_mode == STANDBY_SWAP
    assert DRIVERS["sglang-semipd"].switch_mode == RESTART
    for kind in ("vllm", "vllm-ascend", "mindie"):
        d = DRIVERS[kind]
        assert d.switch_mode == NONE
        assert not d.supports_split
        assert "cannot be set" in d.unsupported_reason
        assert not d.needs_mps
        with pytest.raises(NotImplementedError):
            d.prefill_worker_launch(["x"], 0, 50, "/r", {})


def test_health_endpoints() -> None:
    assert DRIVERS["vllm"].health_endpoint(["vllm", "serve", "m", "--host", "10.0.0.5"]) == HealthEndpoint(
        "10.0.0.5", 8000, "/health"
    )
    assert DRIVERS["vllm"].health_endpoint(["vllm", "serve", "--host", "0.0.0.0"]) == HealthEndpoint(
        "127.0.0.1", 8000, "/health"
    )
    assert DRIVERS["mindie"].health_endpoint(["mindieservice_daemon"]) is None


def test_flag_value_last_wins() -> None:
    assert flag_value(["--port", "1", "--port=2"], "--port") == "2"
    assert flag_value(["--port"], "--port") is None
    assert flag_value(["--portx", "1"], "--port") is None
