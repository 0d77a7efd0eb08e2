"""How the harness gives each phase its share of the SMs: green contexts, plain streams, or the CPU.

A `Lane` is where one phase's steps run: a CUDA stream bound to a set of SMs (or the CPU). A partitioner
splits the device into two disjoint lanes of a requested size and the rest, so a phase timed alone on a
lane and co-running on the same lane sees the same SMs.

- green-context: CUDA green contexts through cuda-python's driver bindings (cuda.bindings.driver), the
  same calls torch.cuda.green_contexts makes. One split of the device's SM resource gives a group of the
  requested size and a disjoint remainder; each becomes a green context with its own stream, wrapped for
  torch as an ExternalStream. (Two contexts made from separate `GreenContext(num_sms=...)` calls would
  overlap: each split starts from the whole device.)
- streams: two ordinary streams on the whole GPU. Shares are not enforced, so only the whole GPU is timed.
- cpu: no partition; a lane is a thread. For tests of the harness's plumbing only.
MPS is not implemented: it needs one process per share (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE is fixed when a
process's context is made); `mps_available()` only reports whether its daemon answers.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

import torch

# sm_90 green contexts come in groups of at least 8 SMs, in multiples of 8 (sm_80: 4, multiples of 2).
# Source: CUDA driver API, green contexts; sglang python/sglang/srt/multiplex/pdmux_context.py.
_SM_GRANULE = {9: 8, 8: 2, 7: 2}


@dataclass
class Lane:
    sms: int
    total_sms: int
    stream: Any = None
    """torch.cuda.Stream (or ExternalStream) on CUDA; None on the CPU."""
    keepalive: Any = None
    """The green context this lane's stream belongs to; destroying it frees the stream."""

    @property
    def share(self) -> float:
        return self.sms / self.total_sms


class _DriverError(RuntimeError):
    pass


def _load_driver() -> Any:
    try:
        from cuda.bindings import driver
    except ImportError:
        from cuda import cuda as driver  # cuda-python < 12.6 names the module cuda.cuda
    return driver


def _ok(drv: Any, ret: Any) -> Any:
    err, *rest = ret if isinstance(ret, tuple) else (ret,)
    if err != drv.CUresult.CUDA_SUCCESS:
        raise _DriverError(f"CUDA driver call failed: {err}")
    return rest[0] if len(rest) == 1 else tuple(rest)


class GreenContexts:
    name = "green-context"

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.drv = _load_driver()
        torch.zeros(1, device=device)  # the primary context must exist before green contexts are made
        self.dev = _ok(self.drv, self.drv.cuDeviceGet(device.index or 0))
        self.total_sms = self._full().sm.smCount
        major, _ = torch.cuda.get_device_capability(device)
        self.granule = _SM_GRANULE.get(major, 8)
        self._live: list[Any] = []

    def _full(self) -> Any:
        return _ok(
            self.drv, self.drv.cuDeviceGetDevResource(self.dev, self.drv.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM)
        )

    def round(self, sms: int) -> int:
        g = self.granule
        return max(g, min(self.total_sms - g, round(sms / g) * g))

    def _lane(self, resource: Any) -> Lane:
        drv = self.drv
        desc = _ok(drv, drv.cuDevResourceGenerateDesc([resource], 1))
        ctx = _ok(drv, drv.cuGreenCtxCreate(desc, self.dev, drv.CUgreenCtxCreate_flags.CU_GREEN_CTX_DEFAULT_STREAM))
        raw = _ok(drv, drv.cuGreenCtxStreamCreate(ctx, drv.CUstream_flags.CU_STREAM_NON_BLOCKING, 0))
        self._live.append((ctx, raw))
        stream = torch.cuda.ExternalStream(int(raw), device=self.device)
        return Lane(sms=resource.sm.smCount, total_sms=self.total_sms, stream=stream, keepalive=ctx)

    def split(self, sms: int) -> tuple[Lane, Lane]:
        """Two disjoint lanes: `sms` SMs (rounded to the granule) and the rest of the device."""
        groups, count, rest = _ok(self.drv, self.drv.cuDevSmResourceSplitByCount(1, self._full(), 0, self.round(sms)))
        if count != 1:
            raise _DriverError(f"asked for one group of {sms} SMs, the driver made {count}")
        return self._lane(groups[0]), self._lane(rest)

    def whole(self) -> Lane:
        return Lane(sms=self.total_sms, total_sms=self.total_sms, stream=torch.cuda.Stream(self.device))

    def close(self) -> None:
        torch.cuda.synchronize(self.device)
        for ctx, raw in self._live:
            _ok(self.drv, self.drv.cuStreamDestroy(raw))
            _ok(self.drv, self.drv.cuGreenCtxDestroy(ctx))
        self._live.clear()


class Streams:
    """Two unpartitioned streams: what is left when green contexts are not there."""

    name = "streams"

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.total_sms = torch.cuda.get_device_properties(device).multi_processor_count

    def whole(self) -> Lane:
        return Lane(sms=self.total_sms, total_sms=self.total_sms, stream=torch.cuda.Stream(self.device))

    def split(self, sms: int) -> tuple[Lane, Lane]:
        raise NotImplementedError("plain streams cannot give a phase part of the SMs")

    def round(self, sms: int) -> int:
        return self.total_sms

    def close(self) -> None:
        torch.cuda.synchronize(self.device)


class Cpu:
    """Nominal lanes on the CPU: shares are labels, not limits. Exercises the harness, measures nothing."""

    name = "cpu"
    total_sms = 100

    def whole(self) -> Lane:
        return Lane(sms=self.total_sms, total_sms=self.total_sms)

    def split(self, sms: int) -> tuple[Lane, Lane]:
        sms = self.round(sms)
        return Lane(sms=sms, total_sms=self.total_sms), Lane(sms=self.total_sms - sms, total_sms=self.total_sms)

    def round(self, sms: int) -> int:
        return max(1, min(self.total_sms - 1, sms))

    def close(self) -> None:
        pass


Partitioner = GreenContexts | Streams | Cpu


def mps_available() -> bool:
    """Whether an MPS control daemon answers on this machine (reported; the harness does not use MPS)."""
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        return False
    try:
        done = subprocess.run([control], input="get_server_list\n", capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def choose(device: torch.device, wanted: str) -> tuple[Partitioner, str]:
    """The partitioner to use, and why: `wanted` is auto, green-context, streams or cpu."""
    if device.type == "cpu":
        return Cpu(), "cpu device"
    if wanted == "mps":
        raise SystemExit("--partitioning mps is not implemented (one process per share); use green-context")
    if wanted in ("auto", "green-context"):
        try:
            gc = GreenContexts(device)
            a, b = gc.split(gc.total_sms // 2)  # prove the whole path works before timing anything
            del a, b
            gc.close()
            return GreenContexts(device), "cuda-python green contexts"
        except (ImportError, AttributeError, RuntimeError) as e:  # no bindings, an old driver, or a refused split
            if wanted == "green-context":
                raise SystemExit(f"green contexts unavailable: {e}") from e
            reason = f"green contexts unavailable ({type(e).__name__}: {e}); MPS daemon answers: {mps_available()}"
            return Streams(device), reason
    if wanted == "streams":
        return Streams(device), "asked for"
    raise SystemExit(f"unknown --partitioning {wanted!r}")
