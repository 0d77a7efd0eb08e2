"""Which performance model describes a node pool's replicas: hardware from the pool, model from the spec.

GPU product / NPU chip labels in the node selector pick the hardware profile, `model.profile` (or the
architecture's default) the model; `--hardware` / `--model` in the engine args win, as they do on the
simulated engine's command line. For real engines the profile is a prior that the policy's online
fit corrects. Pure functions of API types.
"""

from __future__ import annotations

from semipd.api.v1alpha1 import Accelerator, Architecture, InferencePoolSpec, ModelSpec, NodePool
from semipd.perf.latency import LatencyModel
from semipd.perf.profiles import MODELS

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
NPU_CHIP_LABEL = "node.kubernetes.io/npu.chip.name"
DEFAULT_HARDWARE = {Accelerator.NVIDIA: "h100", Accelerator.ASCEND: "ascend-910b3"}
DEFAULT_PROFILE = {Architecture.DENSE: "llama-3-8b", Architecture.MOE: "qwen3-30b-a3b"}

# Product-label substrings, most specific first (H200 before H20).
_GPU_PRODUCTS: tuple[tuple[str, str], ...] = (
    ("H200", "h200"),
    ("H100", "h100"),
    ("H20", "h20"),
    ("A100-SXM4-40GB", "a100-40gb"),
    ("A100", "a100"),
)
_NPU_CHIPS: tuple[tuple[str, str], ...] = (
    ("910B1", "ascend-910b1"),
    ("910B2", "ascend-910b2"),
    ("910B3", "ascend-910b3"),
    ("910B4", "ascend-910b4"),
    ("910C", "ascend-910c"),
    ("910_93", "ascend-910c"),
)


class ProfileError(ValueError):
    """The spec names a model profile the performance model does not have."""


def hardware_profile(pool: NodePool) -> str:
    """Performance-model hardware key for a node pool."""
    if pool.accelerator == Accelerator.NVIDIA:
        label, table = pool.node_selector.get(GPU_PRODUCT_LABEL, ""), _GPU_PRODUCTS
    else:
        label, table = pool.node_selector.get(NPU_CHIP_LABEL, ""), _NPU_CHIPS
    upper = label.upper()
    return next((key for needle, key in table if needle in upper), DEFAULT_HARDWARE[pool.accelerator])


def model_profile(model: ModelSpec) -> str:
    """Performance-model profile key for the served model."""
    name = model.profile or DEFAULT_PROFILE[model.architecture]
    if name not in MODELS:
        raise ProfileError(f"model.profile {name!r} is not a latency-model profile; known: {sorted(MODELS)}")
    return name


def _last_flag(args: list[str], flag: str) -> str | None:
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def latency_model_for(spec: InferencePoolSpec, node_pool: NodePool) -> LatencyModel:
    """The latency model of one replica of `node_pool` (raises ValueError when no profile fits)."""
    args = list(spec.effective_engine(node_pool).args)
    hardware = _last_flag(args, "--hardware") or hardware_profile(node_pool)
    model = _last_flag(args, "--model") or model_profile(spec.model)
    return LatencyModel.from_names(hardware, model, node_pool.accelerators_per_replica)
