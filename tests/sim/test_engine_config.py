"""Simulated-engine configuration: share resolution mirrors the real env; wildcards are refused (pure)."""

from __future__ import annotations

import pytest

from semipd.sim.engine.config import ConfigError, parse_config
from semipd.sim.engine.faults import active_faults, parse_faults

OWNER = ["--role", "decode-owner", "--run-dir", "/r"]
WORKER = ["--role", "prefill-worker", "--run-dir", "/r"]


def test_worker_share_flag_then_mps_env_then_semi_pd_env() -> None:
    env = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "35", "SEMI_PD_PREFILL_SM_PERCENTILE": "45"}
    assert parse_config([*WORKER, "--prefill-percent", "25"], env).prefill_percent == 25
    assert parse_config(WORKER, env).prefill_percent == 35
    assert parse_config(WORKER, {"SEMI_PD_PREFILL_SM_PERCENTILE": "45"}).prefill_percent == 45
    assert parse_config(WORKER, {}).prefill_percent == 80  # Semi-PD's default


def test_owner_decode_share_from_env() -> None:
    assert parse_config(OWNER, {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "90"}).decode_percent == 90
    cfg = parse_config([*OWNER, "--enable-semi-pd"], {"SEMI_PD_PREFILL_SM_PERCENTILE": "60",
                                                      "SEMI_PD_DECODE_SM_PERCENTILE": "95"})  # fmt: skip
    assert (cfg.prefill_percent, cfg.decode_percent) == (60, 95)
    assert parse_config(OWNER, {}).decode_percent == 100


def test_run_dir_from_env() -> None:
    assert parse_config(["--role", "decode-owner"], {"SEMIPD_RUN_DIR": "/x"}).run_dir == "/x"
    with pytest.raises(ConfigError, match="run-dir"):
        parse_config(["--role", "decode-owner"], {})


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_wildcard_host_is_refused(host: str) -> None:
    with pytest.raises(ConfigError, match="wildcard"):
        parse_config([*OWNER, "--host", host], {})


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["--prefill-percent", "0"], {}),
        ([], {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "abc"}),
        (["--speedup", "0"], {}),
    ],
)
def test_bad_values(args: list[str], env: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        parse_config([*WORKER, *args], env)


def test_faults_select_workers_by_share() -> None:
    env = {"SEMIPD_SIM_FAULT": "prefill-crash-on-start:70,71; prefill-hang-on-start"}
    assert active_faults(env, 70) == {"prefill-crash-on-start", "prefill-hang-on-start"}
    assert active_faults(env, 50) == {"prefill-hang-on-start"}
    assert active_faults({}, 50) == frozenset()
    with pytest.raises(ValueError, match="unknown fault"):
        parse_faults("explode")
    with pytest.raises(ValueError, match="bad percent"):
        parse_faults("prefill-crash-on-start:x")
