"""Planning the per-pod MPS control daemon (pure)."""

from __future__ import annotations

from semipd.agent.mps import MpsPlan, plan_mps


def test_absent_binary_gives_a_reason() -> None:
    reason = plan_mps({}, "/semipd/run", None)
    assert isinstance(reason, str)
    assert "nvidia-cuda-mps-control not found" in reason


def test_dirs_from_env_on_shared_volumes() -> None:
    env = {"CUDA_MPS_PIPE_DIRECTORY": "/semipd/mps/pipe", "CUDA_MPS_LOG_DIRECTORY": "/semipd/mps/log"}
    plan = plan_mps(env, "/semipd/run", "/usr/bin/nvidia-cuda-mps-control")
    assert isinstance(plan, MpsPlan)
    assert (plan.pipe_dir, plan.log_dir) == ("/semipd/mps/pipe", "/semipd/mps/log")
    assert plan.env["CUDA_MPS_ENABLE_PER_CTX_DEVICE_MULTIPROCESSOR_PARTITIONING"] == "1"


def test_default_dirs_under_run_dir() -> None:
    plan = plan_mps({}, "/semipd/run", "/bin/mps")
    assert isinstance(plan, MpsPlan)
    assert plan.pipe_dir == "/semipd/run/mps-pipe"
    assert plan.env["CUDA_MPS_PIPE_DIRECTORY"] == "/semipd/run/mps-pipe"
