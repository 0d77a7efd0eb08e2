"""Which latency model describes a node pool's replicas: hardware from the pool, model from the spec.

The same resolution the simulated engine's driver uses (GPU product / NPU chip labels in the
node selector, `model.profile`), with `--hardware` / `--model` in the engine args winning as they
do on the simulated engine's command line. For real engines the profile is a prior that the
estimator corrects from observations.
"""

from __future__ import annotations

from semipd.api.v1alpha1 import InferencePoolSpec, NodePool
from semipd.engines.base import EngineContext
from semipd.engines.sim import hardware_profile, model_profile
from semipd.perf import LatencyModel


def _last_flag(args: list[str], flag: str) -> str | None:
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def latency_model_for(spec: InferencePoolSpec, node_pool: NodePool) -> LatencyModel:
    """The latency model of one replica of `node_pool`."""
    ctx = EngineContext(spec, node_pool)
    args = list(ctx.engine.args)
    hardware = _last_flag(args, "--hardware") or hardware_profile(node_pool)
    model = _last_flag(args, "--model") or model_profile(ctx)
    return LatencyModel.from_names(hardware, model, node_pool.accelerators_per_replica)
