"""The NVIDIA MPS control daemon the pod runs for itself (one per pod, pipe/log dirs on shared volumes).

Per-process MPS percentages need the daemon running before the engine creates CUDA contexts; the
device plugin's equal MPS replicas do not fit two unequal processes, so the agent starts its own.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass

MPS_BINARY = "nvidia-cuda-mps-control"
PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
LOG_ENV = "CUDA_MPS_LOG_DIRECTORY"
PARTITION_ENV = "CUDA_MPS_ENABLE_PER_CTX_DEVICE_MULTIPROCESSOR_PARTITIONING"

log = logging.getLogger("semipd.agent.mps")


@dataclass(frozen=True)
class MpsPlan:
    binary: str
    pipe_dir: str
    log_dir: str
    env: dict[str, str]


def plan_mps(base_env: Mapping[str, str], run_dir: str, binary: str | None) -> MpsPlan | str:
    """What to run to start the daemon, or the reason it cannot be started."""
    if binary is None:
        return f"{MPS_BINARY} not found on PATH; not starting the MPS control daemon"
    pipe_dir = base_env.get(PIPE_ENV) or os.path.join(run_dir, "mps-pipe")
    log_dir = base_env.get(LOG_ENV) or os.path.join(run_dir, "mps-log")
    env = dict(base_env)
    env.update({PIPE_ENV: pipe_dir, LOG_ENV: log_dir, PARTITION_ENV: "1"})
    return MpsPlan(binary, pipe_dir, log_dir, env)


class MpsDaemon:
    def __init__(self, plan: MpsPlan) -> None:
        self.plan = plan
        self.running = False

    @classmethod
    def locate(cls) -> str | None:
        return shutil.which(MPS_BINARY)

    async def start(self) -> None:
        os.makedirs(self.plan.pipe_dir, exist_ok=True)
        os.makedirs(self.plan.log_dir, exist_ok=True)
        proc = await asyncio.create_subprocess_exec(self.plan.binary, "-d", env=self.plan.env)
        rc = await proc.wait()
        if rc != 0:
            raise RuntimeError(f"{self.plan.binary} -d exited with status {rc}")
        self.running = True
        log.info("MPS control daemon started (pipe %s, log %s)", self.plan.pipe_dir, self.plan.log_dir)

    async def stop(self) -> None:
        if not self.running:
            return
        proc = await asyncio.create_subprocess_exec(self.plan.binary, env=self.plan.env, stdin=asyncio.subprocess.PIPE)
        await proc.communicate(b"quit\n")
        self.running = False
        log.info("MPS control daemon stopped")

    def client_env(self) -> dict[str, str]:
        """Env every engine process needs to reach this daemon."""
        return {PIPE_ENV: self.plan.pipe_dir, LOG_ENV: self.plan.log_dir}
