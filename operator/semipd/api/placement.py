"""v1alpha1 API: KV-cache and expert placement, and routing (`spec.placement`, `spec.routing`)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from semipd.api.base import DNS_LABEL, DNS_SUBDOMAIN, ApiModel
from semipd.api.durations import Duration

# --------------------------------------------------------------------------- placement


class KVCachePolicy(StrEnum):
    """How long-context requests are steered between node pools."""

    HEADROOM = "headroom"
    OFF = "off"


class KVCachePlacementSpec(ApiModel):
    """Which node pools serve which context lengths."""

    long_context_threshold: int = Field(default=32768, ge=256, le=10_000_000)
    """Prompts longer than this (tokens) go to the node pools with the most KV-cache headroom per replica (a threshold at or above model.maxContextLength turns steering off)."""

    policy: KVCachePolicy = Field(default=KVCachePolicy.HEADROOM, strict=False)
    """`headroom` (steer long prompts by KV headroom) or `off`."""

    hysteresis: float = Field(default=0.1, ge=0.0, le=1.0)
    """Fraction of per-replica KV capacity by which another pool's headroom must exceed the current long-context pool's before long prompts move."""


class ExpertPlacementSpec(ApiModel):
    """MoE expert replication and placement across devices."""

    enabled: bool = False
    """Compute and apply expert placements; only for `moe` models."""

    redundant_experts: int = Field(default=0, ge=0, le=1024)
    """Extra physical expert slots for replicating hot experts."""

    rebalance_threshold: float = Field(default=1.3, ge=1.0, le=100.0)
    """Rebalance when max/mean device load exceeds this."""

    rebalance_interval: Duration = "10m"
    """Minimum time between two rebalances."""

    rebalance_window: Duration = "5m"
    """How long max/mean device load must stay above the threshold before a rebalance."""


class PlacementSpec(ApiModel):
    """KV-cache and expert placement."""

    kv_cache: KVCachePlacementSpec = Field(default_factory=KVCachePlacementSpec)
    """Long-context steering between node pools."""

    experts: ExpertPlacementSpec = Field(default_factory=ExpertPlacementSpec)
    """MoE expert placement."""


# --------------------------------------------------------------------------- routing


class FailureMode(StrEnum):
    """What the gateway does when the endpoint picker is unreachable (GIE semantics)."""

    FAIL_OPEN = "FailOpen"
    FAIL_CLOSE = "FailClose"


class EndpointPickerRef(ApiModel):
    """The endpoint-picker (EPP) Service the owned Gateway API Inference Extension pools point at."""

    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    """EPP Service name in the InferencePool's namespace."""

    port: int = Field(default=9002, ge=1, le=65535)
    """EPP gRPC port."""

    failure_mode: FailureMode = Field(default=FailureMode.FAIL_OPEN, strict=False)
    """`FailOpen` (route to any pod when the EPP is down; what KServe and llm-d ship) or `FailClose`."""


class GatewayParentRef(ApiModel):
    """A Gateway (or one of its listeners) the owned HTTPRoute attaches to."""

    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    """Gateway name."""

    namespace: str | None = Field(default=None, min_length=1, max_length=63, pattern=DNS_LABEL)
    """Gateway namespace; unset means the InferencePool's own (the Gateway must allow routes from it)."""

    section_name: str | None = Field(default=None, min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    """Listener name within the Gateway; unset means every listener that accepts the route."""


class RoutingSpec(ApiModel):
    """How routers find the pods: owned Gateway API Inference Extension (GIE) InferencePools."""

    gateway_inference_pools: bool = True
    """Create one GIE InferencePool per accelerator vendor when the GIE CRD is installed."""

    endpoint_picker: EndpointPickerRef | None = None
    """EPP the GIE pools reference; without it they carry only the selector and target port."""

    gateway_parent_refs: list[GatewayParentRef] = Field(default_factory=list, max_length=32)
    """Gateways the owned HTTPRoute (long-context and default rules over the GIE pools, weighted by the KV-cache placement) attaches to; empty leaves it unattached."""
