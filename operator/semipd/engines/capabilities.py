"""What each engine kind can do, as the operator's semantic checks and the policy see it.

Engine drivers (one per `engine.kind`) carry launch details; this table is the capability half
they share with the operator: which accelerator vendors an engine runs on, whether it can change
its prefill/decode split, and how (the switch mode decides the cost the policy weighs).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from semipd.api.v1alpha1 import Accelerator, EngineKind


class SwitchMode(StrEnum):
    """How a split change happens (architecture.md, 'How a split change happens')."""

    STANDBY_SWAP = "standby_swap"
    RESTART = "restart"
    MASK = "mask"
    NONE = "none"


@dataclass(frozen=True)
class EngineCapabilities:
    """Capabilities of one engine kind."""

    accelerators: frozenset[Accelerator]
    switch_mode: SwitchMode
    supports_expert_rebalance: bool = False
    """The engine moves experts while serving: its own EPLB (vLLM) or a map pushed through the agent
    (the simulator; `semipd.agent.drivers.Driver.supports_expert_rebalance` says which)."""
    reads_expert_map_at_startup: bool = False
    """The engine loads an expert map file at start-up, so a new map means a rolling restart
    (upstream SGLang `--init-expert-location`, vllm-ascend `expert_map_path`). No shipped driver
    mounts the placement ConfigMap yet, so no kind sets this."""

    @property
    def supports_split(self) -> bool:
        """Whether the split can change at all (restart counts: it is a slow lever, not none)."""
        return self.switch_mode != SwitchMode.NONE


_NVIDIA = frozenset({Accelerator.NVIDIA})
_ASCEND = frozenset({Accelerator.ASCEND})

CAPABILITIES: dict[EngineKind, EngineCapabilities] = {
    # Semi-PD `main` fixes the split at launch (SEMI_PD_*_SM_PERCENTILE): changing it relaunches.
    EngineKind.SGLANG_SEMIPD: EngineCapabilities(_NVIDIA, SwitchMode.RESTART),
    # Upstream SGLang PD-Multiplexing builds its green-context SM groups once, from the
    # --pdmux-config-path file, at scheduler start: a new split is a new file and a relaunch.
    # Blackwell (compute capability 10) is not supported upstream yet (sglang #32931).
    EngineKind.SGLANG: EngineCapabilities(_NVIDIA, SwitchMode.RESTART),
    # Co-located engines: no separate prefill/decode workers, nothing to split.
    EngineKind.VLLM: EngineCapabilities(_NVIDIA, SwitchMode.NONE, supports_expert_rebalance=True),
    EngineKind.VLLM_ASCEND: EngineCapabilities(_ASCEND, SwitchMode.NONE, supports_expert_rebalance=True),
    EngineKind.MINDIE: EngineCapabilities(_ASCEND, SwitchMode.NONE),
    # The simulated engine mirrors the DistServe-branch standby swap on either vendor, and loads expert
    # maps online like SGLang's update_expert_location. The Semi-PD fork (SGLang 0.4.4) predates EPLB.
    EngineKind.SIM: EngineCapabilities(_NVIDIA | _ASCEND, SwitchMode.STANDBY_SWAP, supports_expert_rebalance=True),
    # The simulated engine launched as Semi-PD `main` is: split from env at launch, changed by a restart.
    EngineKind.SIM_SEMIPD: EngineCapabilities(_NVIDIA | _ASCEND, SwitchMode.RESTART),
}


def capabilities_of(kind: EngineKind) -> EngineCapabilities:
    """Capabilities of `kind`."""
    return CAPABILITIES[kind]
