"""The `semipd.io/v1alpha1` InferencePool API: pydantic models that are the single source of truth.

The CRD in `crds/` is generated from these classes (`semipd crds`); attribute docstrings become the
`kubectl explain` text, `Field` constraints become schema bounds and each model's `__rules__`
become CEL `x-kubernetes-validations`. The operator parses live objects with the same models.
The models live in one module per spec area (base, model_engine, nodepools, scaling, placement, spec,
status); this module is the root object and the one import point.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from semipd.api.base import (
    API_VERSION,
    CATEGORIES,
    DNS_LABEL,
    DNS_SUBDOMAIN,
    GROUP,
    KIND,
    MAX_NAME_LENGTH,
    NAME_RULE,
    PLURAL,
    QUALIFIED_NAME,
    QUANTITY,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
    ApiModel,
    Quantity,
)
from semipd.api.model_engine import (
    SIMULATED,
    Architecture,
    EngineKind,
    EngineOverride,
    EnginePorts,
    EngineSpec,
    EnvValueFrom,
    EnvVar,
    ModelSpec,
    ResourceRequirements,
    SecretKeyRef,
)
from semipd.api.nodepools import (
    DEFAULT_RESOURCE_NAME,
    Accelerator,
    NodePool,
    Toleration,
)
from semipd.api.placement import (
    EndpointPickerRef,
    ExpertPlacementSpec,
    FailureMode,
    GatewayParentRef,
    KVCachePlacementSpec,
    KVCachePolicy,
    PlacementSpec,
    RoutingSpec,
)
from semipd.api.scaling import (
    AutoscalingMode,
    AutoscalingSpec,
    SemiPDSpec,
    SLOSpec,
)
from semipd.api.spec import (
    InferencePoolSpec,
)
from semipd.api.status import (
    Condition,
    ConditionStatus,
    Decision,
    ExpertPlacementStatus,
    InferencePoolStatus,
    KVCachePlacementStatus,
    KVCachePoolStatus,
    NodePoolStatus,
    Observed,
    PlacementStatus,
    PodSplit,
    PrinterSummary,
)

__all__ = [
    "API_VERSION",
    "CATEGORIES",
    "DEFAULT_RESOURCE_NAME",
    "DNS_LABEL",
    "DNS_SUBDOMAIN",
    "GROUP",
    "KIND",
    "MAX_NAME_LENGTH",
    "NAME_RULE",
    "PLURAL",
    "QUALIFIED_NAME",
    "QUANTITY",
    "SHORT_NAMES",
    "SIMULATED",
    "SINGULAR",
    "VERSION",
    "Accelerator",
    "ApiModel",
    "Architecture",
    "AutoscalingMode",
    "AutoscalingSpec",
    "Condition",
    "ConditionStatus",
    "Decision",
    "EndpointPickerRef",
    "EngineKind",
    "EngineOverride",
    "EnginePorts",
    "EngineSpec",
    "EnvValueFrom",
    "EnvVar",
    "ExpertPlacementSpec",
    "ExpertPlacementStatus",
    "FailureMode",
    "GatewayParentRef",
    "InferencePool",
    "InferencePoolSpec",
    "InferencePoolStatus",
    "KVCachePlacementSpec",
    "KVCachePlacementStatus",
    "KVCachePolicy",
    "KVCachePoolStatus",
    "ModelSpec",
    "NodePool",
    "NodePoolStatus",
    "Observed",
    "PlacementSpec",
    "PlacementStatus",
    "PodSplit",
    "PrinterSummary",
    "Quantity",
    "ResourceRequirements",
    "RoutingSpec",
    "SLOSpec",
    "SecretKeyRef",
    "SemiPDSpec",
    "Toleration",
]


class InferencePool(BaseModel):
    """An elastic semi-PD LLM inference fleet across NVIDIA GPU and Huawei Ascend node pools."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, use_attribute_docstrings=True)

    api_version: Literal["semipd.io/v1alpha1"] = "semipd.io/v1alpha1"
    kind: Literal["InferencePool"] = "InferencePool"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: InferencePoolSpec
    status: InferencePoolStatus | None = None
