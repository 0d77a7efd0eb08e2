"""v1alpha1 API: node pools (`spec.nodePools[]`): accelerator, scheduling, replica bounds, cost."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field

from semipd.api.base import DNS_LABEL, QUALIFIED_NAME, ApiModel
from semipd.api.model_engine import EngineOverride
from semipd.api.rules import Rule

# --------------------------------------------------------------------------- node pools


class Accelerator(StrEnum):
    """Accelerator vendor of a node pool."""

    NVIDIA = "nvidia"
    ASCEND = "ascend"


DEFAULT_RESOURCE_NAME = {Accelerator.NVIDIA: "nvidia.com/gpu", Accelerator.ASCEND: "huawei.com/Ascend910"}


class Toleration(ApiModel):
    """A Kubernetes toleration (same fields as core/v1 Toleration)."""

    __rules__ = (
        Rule(
            cel="self.operator != 'Exists' || !has(self.value)",
            message="a toleration with operator Exists must not set value",
            holds=lambda t: t.operator != "Exists" or t.value is None,
        ),
    )

    key: str | None = Field(default=None, max_length=317, pattern=QUALIFIED_NAME)
    """Taint key; empty with operator Exists tolerates everything."""

    operator: Literal["Exists", "Equal"] = "Equal"
    """`Equal` (key and value match) or `Exists` (key present)."""

    value: str | None = Field(default=None, max_length=63)
    """Taint value for operator Equal."""

    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Taint effect to tolerate; empty tolerates all effects."""

    toleration_seconds: int | None = Field(default=None, ge=0)
    """For NoExecute: how long the pod stays bound after the taint appears."""


class NodePool(ApiModel):
    """A group of nodes of one accelerator type that replicas may be placed on."""

    __rules__ = (
        Rule(
            cel="self.minReplicas <= self.maxReplicas",
            message="minReplicas must not exceed maxReplicas",
            holds=lambda p: p.min_replicas <= p.max_replicas,
        ),
        Rule(
            cel="!has(self.resourceName) || self.accelerator != 'nvidia' || self.resourceName.startsWith('nvidia.com/')",
            message="an nvidia node pool's resourceName must be an nvidia.com/ resource",
            holds=lambda p: (
                p.resource_name is None
                or p.accelerator != Accelerator.NVIDIA
                or p.resource_name.startswith("nvidia.com/")
            ),
        ),
        Rule(
            cel="!has(self.resourceName) || self.accelerator != 'ascend' || self.resourceName.startsWith('huawei.com/')",
            message="an ascend node pool's resourceName must be a huawei.com/ resource",
            holds=lambda p: (
                p.resource_name is None
                or p.accelerator != Accelerator.ASCEND
                or p.resource_name.startswith("huawei.com/")
            ),
        ),
    )

    name: str = Field(min_length=1, max_length=40, pattern=DNS_LABEL)
    """Node pool name; the workload is named `<inferencepool>-<name>`."""

    accelerator: Accelerator = Field(strict=False)
    """`nvidia` (GPU) or `ascend` (Huawei NPU)."""

    resource_name: str | None = Field(default=None, max_length=253, pattern=r"^[a-z0-9.-]+/[-A-Za-z0-9_.]+$")
    """Extended resource to request; defaults to `nvidia.com/gpu` or `huawei.com/Ascend910`."""

    accelerators_per_replica: int = Field(default=1, ge=1, le=16)
    """Accelerators (GPUs or NPUs) per replica, i.e. the tensor-parallel width."""

    node_selector: dict[Annotated[str, Field(max_length=317)], Annotated[str, Field(max_length=63)]] = Field(
        default_factory=dict, max_length=32
    )
    """Node labels a replica's node must carry."""

    tolerations: list[Toleration] = Field(default_factory=list, max_length=16)
    """Taints replicas tolerate (Ascend nodes are commonly tainted)."""

    min_replicas: int = Field(default=1, ge=0, le=1000)
    """Replicas always kept in this pool."""

    max_replicas: int = Field(default=4, ge=0, le=1000)
    """Upper bound the autoscaler may scale this pool to."""

    cost_per_hour: float = Field(default=1.0, ge=0, le=1_000_000)
    """Price of one replica-hour, in any currency; new capacity goes to the cheapest pool per unit of SLO capacity."""

    priority: int = Field(default=0, ge=0, le=1000)
    """Tie-breaker between pools of equal cost: higher is preferred."""

    kv_cache_tokens: int | None = Field(default=None, ge=1, le=1_000_000_000)
    """KV-cache capacity of one replica in tokens; unset means computed from the accelerator and model profiles (HBM minus weights and activations)."""

    engine: EngineOverride | None = None
    """Engine settings for this pool only, replacing the InferencePool-wide `engine` fields that are set."""

    def effective_resource_name(self) -> str:
        """The extended resource replicas request, with the vendor default applied."""
        return self.resource_name or DEFAULT_RESOURCE_NAME[self.accelerator]
