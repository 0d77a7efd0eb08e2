"""v1alpha1 API: `InferencePoolStatus`: conditions, per-pool state, observations, decisions, placement."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

DETAIL_MAX_LENGTH = 256
"""Longest value of one decision detail (the policy chunks a long pod list to fit)."""

# --------------------------------------------------------------------------- status


class ConditionStatus(StrEnum):
    """metav1.ConditionStatus."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(BaseModel):
    """A metav1.Condition: one aspect of the pool's state."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, use_attribute_docstrings=True)

    type: str = Field(
        max_length=316,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
    )
    """Condition type: Ready, Progressing, SLOMet, MetricsAvailable, Degraded or InvalidSpec."""

    status: ConditionStatus
    """`True`, `False` or `Unknown`."""

    observed_generation: int | None = Field(default=None, ge=0, json_schema_extra={"format": "int64"})
    """The spec generation this condition was computed from."""

    last_transition_time: str = Field(max_length=64, json_schema_extra={"format": "date-time"})
    """When the status last changed (RFC 3339)."""

    reason: str = Field(min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    """Machine-readable CamelCase reason."""

    message: str = Field(max_length=32768)
    """Human-readable detail."""


class PodSplit(BaseModel):
    """The split one pod currently runs."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, use_attribute_docstrings=True)

    pod: str = Field(max_length=253)
    """Pod name."""

    prefill_percent: int | None = Field(default=None, ge=0, le=100)
    """Prefill worker share; unset when unknown."""

    decode_percent: int | None = Field(default=None, ge=0, le=100)
    """Decode worker share; unset when unknown."""


class NodePoolStatus(BaseModel):
    """Observed state of one node pool's workload."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, use_attribute_docstrings=True)

    name: str = Field(max_length=40)
    """Node pool name."""

    accelerator: str = Field(max_length=16)
    """Accelerator vendor."""

    engine: str = Field(default="", max_length=32)
    """Engine kind running in this pool."""

    desired_replicas: int = Field(default=0, ge=0)
    """Replicas the operator wants."""

    replicas: int = Field(default=0, ge=0)
    """Replicas that exist."""

    ready_replicas: int = Field(default=0, ge=0)
    """Replicas that are ready."""

    split_supported: bool = False
    """Whether this pool's engine can change its prefill/decode split."""

    splits: list[PodSplit] = Field(default_factory=list, max_length=256)
    """Current split of each pod."""


class Observed(BaseModel):
    """The last latency observation the autoscaler used."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, use_attribute_docstrings=True)

    ttft_p99: str | None = Field(default=None, max_length=32)
    """Fleet-wide p99 time to first token."""

    itl_p99: str | None = Field(default=None, max_length=32)
    """Fleet-wide p99 inter-token latency."""

    request_rate: float | None = Field(default=None, ge=0)
    """Requests per second."""

    time: str | None = Field(default=None, max_length=64, json_schema_extra={"format": "date-time"})
    """When the observation was taken."""


class Decision(BaseModel):
    """One autoscaler or placement decision, with its reason and the numbers behind it."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, use_attribute_docstrings=True)

    time: str = Field(max_length=64, json_schema_extra={"format": "date-time"})
    """When it was taken."""

    action: str = Field(max_length=64)
    """What was done, e.g. `SplitChange`, `SplitHeld` (with why), `SplitOutcome`, `ScaleOut`, `ScaleIn`, `PoolFallback`."""

    node_pool: str | None = Field(default=None, max_length=40)
    """Node pool affected."""

    pod: str | None = Field(default=None, max_length=253)
    """Pod affected (split changes); a new operator resumes its cooldowns from it."""

    reason: str = Field(max_length=128, pattern=r"^[A-Za-z][A-Za-z0-9]*$")
    """Machine-readable CamelCase reason."""

    message: str = Field(default="", max_length=1024)
    """Human-readable detail."""

    details: dict[str, Annotated[str, Field(max_length=DETAIL_MAX_LENGTH)]] = Field(default_factory=dict, max_length=16)
    """The numbers behind the decision (observed and predicted latencies, replicas, shares)."""


class PrinterSummary(BaseModel):
    """Pre-rendered strings for `kubectl get sipool` columns."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, use_attribute_docstrings=True)

    pools: int = Field(default=0, ge=0)
    """Number of node pools."""

    replicas: str = Field(default="0/0", max_length=32)
    """Ready/desired replicas across pools."""

    split: str = Field(default="-", max_length=32)
    """Representative prefill:decode split (the most common one)."""

    ttft_p99: str = Field(default="-", max_length=32)
    """Last p99 TTFT."""

    itl_p99: str = Field(default="-", max_length=32)
    """Last p99 ITL."""


class KVCachePoolStatus(BaseModel):
    """KV-cache capacity, usage and routing weights of one node pool."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, use_attribute_docstrings=True)

    name: str = Field(max_length=40)
    """Node pool name."""

    capacity_tokens: int = Field(default=0, ge=0, le=1_000_000_000)
    """KV-cache capacity of one replica, in tokens."""

    usage: float | None = Field(default=None, ge=0.0, le=1.0)
    """Observed KV-cache usage (fraction, mean over ready replicas); unset when unknown."""

    headroom_tokens: int | None = Field(default=None, ge=0, le=1_000_000_000)
    """Free KV-cache tokens per replica; unset when usage is unknown."""

    context_range: str = Field(default="", max_length=64)
    """Prompt lengths this pool serves, as the llm-d context-length-range label value (`min-max` tokens)."""

    short_weight: int = Field(default=0, ge=0, le=100)
    """Share (percent) of prompts at or below the long-context threshold routed to this pool."""

    long_weight: int = Field(default=0, ge=0, le=100)
    """Share (percent) of prompts above the long-context threshold routed to this pool."""


class KVCachePlacementStatus(BaseModel):
    """Where long-context requests go and why."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, use_attribute_docstrings=True)

    threshold: int = Field(default=0, ge=0)
    """Long-context threshold in force (prompt tokens)."""

    long_context_pools: list[Annotated[str, Field(max_length=40)]] = Field(default_factory=list, max_length=8)
    """Node pools long prompts are steered to."""

    long_request_share: float | None = Field(default=None, ge=0.0, le=1.0)
    """Observed fraction of prompts above the threshold; unset when unknown."""

    pools: list[KVCachePoolStatus] = Field(
        default_factory=list,
        max_length=8,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    """Per node pool KV capacity, usage and weights."""

    last_change: str | None = Field(default=None, max_length=64, json_schema_extra={"format": "date-time"})
    """When the long-context pools last changed."""

    reason: str = Field(default="", max_length=128)
    """Machine-readable CamelCase reason for the current placement."""

    message: str = Field(default="", max_length=1024)
    """Human-readable detail."""


class ExpertPlacementStatus(BaseModel):
    """The expert placement of one node pool: which map is in force and how balanced it is."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, use_attribute_docstrings=True)

    node_pool: str = Field(max_length=40)
    """Node pool name."""

    config_map: str = Field(default="", max_length=253)
    """ConfigMap holding the placement (SGLang and vllm-ascend formats)."""

    version: int = Field(default=0, ge=0, json_schema_extra={"format": "int64"})
    """Placement version; increases with every rebalance."""

    applied: str = Field(default="0/0", max_length=32)
    """Ready replicas running this version / ready replicas."""

    actuation: str = Field(default="", max_length=32)
    """How maps reach this pool's engines: `Agent` (loaded online through the in-pod agents), `RollingRestart` (read at start-up), `EngineRebalances` (the engine's own EPLB) or `Unsupported`."""

    max_mean_now: float | None = Field(default=None, ge=0.0)
    """Max/mean device load of the worst layer under the placement in force, at the last evaluation."""

    max_mean_before: float | None = Field(default=None, ge=0.0)
    """Max/mean device load of the worst layer under the previous placement, on the load that triggered the rebalance."""

    max_mean_after: float | None = Field(default=None, ge=0.0)
    """Max/mean device load of the worst layer the new placement predicts on the same load."""

    balancedness_before: float | None = Field(default=None, ge=0.0, le=1.0)
    """Mean/max device load (SGLang balancedness) under the previous placement."""

    balancedness_after: float | None = Field(default=None, ge=0.0, le=1.0)
    """Mean/max device load the new placement predicts."""

    last_rebalance: str | None = Field(default=None, max_length=64, json_schema_extra={"format": "date-time"})
    """When the current version was written."""

    reason: str = Field(default="", max_length=128)
    """Machine-readable CamelCase reason of the last trigger evaluation."""

    message: str = Field(default="", max_length=1024)
    """Human-readable detail."""


class PlacementStatus(BaseModel):
    """KV-cache and expert placement in force."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, use_attribute_docstrings=True)

    kv_cache: KVCachePlacementStatus | None = None
    """Long-context steering between node pools."""

    experts: list[ExpertPlacementStatus] = Field(
        default_factory=list,
        max_length=8,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["nodePool"]},
    )
    """Per node pool expert placement."""


class InferencePoolStatus(BaseModel):
    """Observed state, written only by the operator."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, use_attribute_docstrings=True)

    observed_generation: int | None = Field(default=None, ge=0, json_schema_extra={"format": "int64"})
    """The spec generation the status reflects."""

    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=16,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """Ready, Progressing, SLOMet, MetricsAvailable, Degraded, InvalidSpec."""

    node_pools: list[NodePoolStatus] = Field(
        default_factory=list,
        max_length=8,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    """Per node pool replicas and splits."""

    observed: Observed | None = None
    """Last observed latencies."""

    decisions: list[Decision] = Field(default_factory=list, max_length=20)
    """The most recent decisions, newest last (bounded)."""

    placement: PlacementStatus | None = None
    """KV-cache and expert placement in force."""

    summary: PrinterSummary | None = None
    """Values shown by `kubectl get sipool`."""
