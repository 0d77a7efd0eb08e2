"""Engine drivers: per `engine.kind`, what the engine can do and how its pods are built.

`get_driver(kind)` returns the driver (pod-template parts, metric names and PromQL) for
`sglang-semipd`, `sglang` (upstream PD-Multiplexing), `vllm`, `vllm-ascend`, `mindie`, `sim` or `sim-semipd`;
`capabilities_of(kind)` what it can do.
"""

from semipd.engines.base import DriverError, EngineContext, EngineDriver, EngineFile, EngineParts
from semipd.engines.capabilities import CAPABILITIES, EngineCapabilities, SwitchMode, capabilities_of
from semipd.engines.mindie import MINDIE
from semipd.engines.promql import MetricSet
from semipd.engines.sglang import SGLANG_SEMIPD
from semipd.engines.sglang_pdmux import SGLANG
from semipd.engines.sim import SIM, SIM_SEMIPD
from semipd.engines.vllm import VLLM, VLLM_ASCEND

DRIVERS: dict[str, EngineDriver] = {
    d.kind: d for d in (SGLANG_SEMIPD, SGLANG, VLLM, VLLM_ASCEND, MINDIE, SIM, SIM_SEMIPD)
}


def get_driver(kind: str) -> EngineDriver:
    """The driver for an engine kind (an EngineKind value or its string)."""
    try:
        return DRIVERS[str(kind)]
    except KeyError:
        raise KeyError(f"no engine driver for kind {kind!r}; known: {sorted(DRIVERS)}") from None


__all__ = [
    "CAPABILITIES",
    "DRIVERS",
    "DriverError",
    "EngineCapabilities",
    "EngineContext",
    "EngineDriver",
    "EngineFile",
    "EngineParts",
    "MetricSet",
    "SwitchMode",
    "capabilities_of",
    "get_driver",
]
