"""Cluster facts for pure tests: the default e2e node layout and the engines' capabilities."""

from __future__ import annotations

from dataclasses import dataclass

from semipd.api.semantics import NodeInfo, Taint
from semipd.api.v1alpha1 import Accelerator, EngineKind

GPU_NODES = tuple(
    NodeInfo(
        name=f"gpu-h200-{i}",
        labels={"nvidia.com/gpu.product": "NVIDIA-H200", "semipd.io/accelerator": "nvidia"},
        allocatable={"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"},
    )
    for i in range(4)
)
ASCEND_NODES = tuple(
    NodeInfo(
        name=f"ascend-910b-{i}",
        labels={"accelerator": "huawei-Ascend910", "semipd.io/accelerator": "ascend"},
        allocatable={"cpu": "192", "memory": "1Ti", "huawei.com/Ascend910": "8"},
        taints=(Taint("huawei.com/Ascend910", "present", "NoSchedule"),),
    )
    for i in range(2)
)
NODES = GPU_NODES + ASCEND_NODES


@dataclass(frozen=True)
class Caps:
    supports_split: bool
    accelerators: frozenset[Accelerator]


# What each engine can do, as docs/engines.md states it; tests/engines checks the drivers agree.
EXPECTED_CAPS = {
    EngineKind.SGLANG_SEMIPD: Caps(True, frozenset({Accelerator.NVIDIA})),
    EngineKind.SGLANG: Caps(True, frozenset({Accelerator.NVIDIA})),
    EngineKind.VLLM: Caps(False, frozenset({Accelerator.NVIDIA})),
    EngineKind.VLLM_ASCEND: Caps(False, frozenset({Accelerator.ASCEND})),
    EngineKind.MINDIE: Caps(False, frozenset({Accelerator.ASCEND})),
    EngineKind.SIM: Caps(True, frozenset({Accelerator.NVIDIA, Accelerator.ASCEND})),
    EngineKind.SIM_SEMIPD: Caps(True, frozenset({Accelerator.NVIDIA, Accelerator.ASCEND})),
}


def caps_of(kind: EngineKind) -> Caps:
    return EXPECTED_CAPS[kind]
