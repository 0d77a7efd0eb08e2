"""The `semipd.io/v1alpha1` InferencePool API: pydantic models that are the single source of truth.

The CRD in `crds/` is generated from these classes (`semipd crds`); attribute docstrings become the
`kubectl explain` text, `Field` constraints become schema bounds and each model's `__rules__`
become CEL `x-kubernetes-validations`. The operator parses live objects with the same models.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from semipd.api.durations import Duration
from semipd.api.rules import Rule, RuleModel

GROUP = "semipd.io"
VERSION = "v1alpha1"
KIND = "InferencePool"
PLURAL = "inferencepools"
SINGULAR = "inferencepool"
SHORT_NAMES = ("sipool",)
CATEGORIES = ("semipd",)
API_VERSION = f"{GROUP}/{VERSION}"

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
QUANTITY = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
QUALIFIED_NAME = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)

Quantity = Annotated[
    int | str,
    Field(json_schema_extra={"x-kubernetes-int-or-string": True, "pattern": QUANTITY}),
]
"""A Kubernetes resource quantity (`8`, `500m`, `64Gi`)."""


class ApiModel(RuleModel):
    """Base for every API object: camelCase on the wire, docstrings as descriptions, no extras."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        use_attribute_docstrings=True,
        extra="forbid",
        frozen=True,
    )


MAX_NAME_LENGTH = 40

NAME_RULE = Rule(
    cel=f"size(self.metadata.name) <= {MAX_NAME_LENGTH} && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
    message=f"metadata.name must be a DNS label of at most {MAX_NAME_LENGTH} characters starting with a letter "
    "(it prefixes workload, Service and label names)",
    holds=lambda name: len(name) <= MAX_NAME_LENGTH and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) is not None,
)
"""The InferencePool's own name becomes part of child names and label values, so it is bounded."""

# --------------------------------------------------------------------------- model


class Architecture(StrEnum):
    """Transformer family, which decides whether expert placement applies."""

    DENSE = "dense"
    MOE = "moe"


class ModelSpec(ApiModel):
    """The model every replica serves."""

    __rules__ = (
        Rule(
            cel="self.architecture != 'moe' || (has(self.experts) && has(self.expertsPerToken))",
            message="an moe model needs experts and expertsPerToken",
            holds=lambda m: (
                m.architecture != Architecture.MOE or (m.experts is not None and m.experts_per_token is not None)
            ),
        ),
        Rule(
            cel="self.architecture != 'dense' || (!has(self.experts) && !has(self.expertsPerToken))",
            message="experts and expertsPerToken apply only to architecture moe",
            holds=lambda m: m.architecture != Architecture.DENSE or (m.experts is None and m.experts_per_token is None),
        ),
        Rule(
            cel="!has(self.experts) || !has(self.expertsPerToken) || self.expertsPerToken <= self.experts",
            message="expertsPerToken must not exceed experts",
            holds=lambda m: m.experts is None or m.experts_per_token is None or m.experts_per_token <= m.experts,
        ),
    )

    name: str = Field(min_length=1, max_length=253)
    """Served model name, as clients put it in the OpenAI `model` field (e.g. `meta-llama/Llama-3.1-8B`)."""

    source: str = Field(min_length=1, max_length=2048, pattern=r"^[a-z][a-z0-9+.-]*://\S+$")
    """Where the weights come from, as a URI: `hf://org/name`, `s3://bucket/path`, `pvc://claim/path`, `file:///models/x`."""

    architecture: Architecture = Architecture.DENSE
    """`dense` or `moe` (mixture of experts)."""

    experts: int | None = Field(default=None, ge=1, le=1024)
    """Routed experts per MoE layer; required when architecture is `moe`."""

    experts_per_token: int | None = Field(default=None, ge=1, le=64)
    """Experts activated per token (top-k); required when architecture is `moe`."""

    max_context_length: int = Field(default=32768, ge=128, le=10_000_000)
    """Longest prompt plus output, in tokens, the engine is started with."""

    profile: str | None = Field(default=None, max_length=63, pattern=DNS_LABEL)
    """Latency-model profile used by the simulated engine and the planner (e.g. `llama-3-8b`); optional."""


# --------------------------------------------------------------------------- engine


class EngineKind(StrEnum):
    """Which engine the pods run; each kind has a driver that knows its flags and metrics."""

    SGLANG_SEMIPD = "sglang-semipd"
    VLLM = "vllm"
    VLLM_ASCEND = "vllm-ascend"
    MINDIE = "mindie"
    SIM = "sim"


class SecretKeyRef(ApiModel):
    """A key of a Secret in the InferencePool's namespace."""

    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    """Secret name."""

    key: str = Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")
    """Key inside the Secret."""


class EnvValueFrom(ApiModel):
    """Where an environment variable's value comes from when it is not literal."""

    secret_key_ref: SecretKeyRef
    """Read the value from a Secret key (e.g. an `HF_TOKEN`)."""


class EnvVar(ApiModel):
    """An extra environment variable for the engine container."""

    __rules__ = (
        Rule(
            cel="has(self.value) != has(self.valueFrom)",
            message="set exactly one of value and valueFrom",
            holds=lambda e: (e.value is None) != (e.value_from is None),
        ),
    )

    name: str = Field(min_length=1, max_length=256, pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
    """Variable name."""

    value: str | None = Field(default=None, max_length=32768)
    """Literal value."""

    value_from: EnvValueFrom | None = None
    """Value from a Secret key."""


class EnginePorts(ApiModel):
    """Container ports the engine and the in-pod agent listen on."""

    __rules__ = (
        Rule(
            cel="self.http != self.admin",
            message="the engine http port and the agent admin port must differ",
            holds=lambda p: p.http != p.admin,
        ),
    )

    http: int = Field(default=8000, ge=1024, le=65535)
    """OpenAI-compatible API port (also serves `/metrics` unless `metrics` is set)."""

    metrics: int | None = Field(default=None, ge=1024, le=65535)
    """Separate metrics port, for engines that expose one (MindIE uses 1027)."""

    admin: int = Field(default=9090, ge=1024, le=65535)
    """The semi-PD agent's admin API port (split changes, health, agent metrics)."""


class ResourceRequirements(ApiModel):
    """CPU and memory for the engine container; accelerators come from the node pool."""

    requests: dict[str, Quantity] = Field(default_factory=dict, max_length=16)
    """Minimum resources, e.g. `cpu: "8"`, `memory: 64Gi`."""

    limits: dict[str, Quantity] = Field(default_factory=dict, max_length=16)
    """Maximum resources."""


class EngineSpec(ApiModel):
    """The inference engine every replica runs, wrapped by the semi-PD agent."""

    __rules__ = (
        Rule(
            cel="self.kind == 'sim' || has(self.image)",
            message="image is required unless kind is sim",
            holds=lambda e: e.kind == EngineKind.SIM or e.image is not None,
        ),
    )

    kind: EngineKind = EngineKind.SGLANG_SEMIPD
    """`sglang-semipd` (Semi-PD SGLang fork), `vllm`, `vllm-ascend`, `mindie`, or `sim` (the simulated engine)."""

    image: str | None = Field(default=None, min_length=1, max_length=1024)
    """Engine container image; the simulated engine defaults to the operator image."""

    args: list[Annotated[str, Field(max_length=4096)]] = Field(default_factory=list, max_length=64)
    """Extra engine arguments appended after the driver's own."""

    env: list[EnvVar] = Field(default_factory=list, max_length=64)
    """Extra environment variables for the engine."""

    ports: EnginePorts = Field(default_factory=EnginePorts)
    """Ports of the engine API and the agent admin API."""

    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    """CPU and memory of the engine container."""


class EngineOverride(ApiModel):
    """Per node pool engine settings that replace the InferencePool-wide ones (e.g. vllm-ascend on Ascend)."""

    kind: EngineKind | None = None
    """Engine kind for this node pool."""

    image: str | None = Field(default=None, min_length=1, max_length=1024)
    """Engine image for this node pool."""

    args: list[Annotated[str, Field(max_length=4096)]] | None = Field(default=None, max_length=64)
    """Replaces `engine.args` for this node pool."""

    env: list[EnvVar] | None = Field(default=None, max_length=64)
    """Replaces `engine.env` for this node pool."""

    resources: ResourceRequirements | None = None
    """Replaces `engine.resources` for this node pool."""


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

    accelerator: Accelerator
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


# --------------------------------------------------------------------------- semi-PD, SLO, autoscaling


class SemiPDSpec(ApiModel):
    """Prefill/decode compute split of each replica (percent of SMs or AI cores per phase)."""

    __rules__ = (
        Rule(
            cel="self.minPrefillPercent <= self.maxPrefillPercent",
            message="minPrefillPercent must not exceed maxPrefillPercent",
            holds=lambda s: s.min_prefill_percent <= s.max_prefill_percent,
        ),
        Rule(
            cel="self.minPrefillPercent <= self.initialPrefillPercent && self.initialPrefillPercent <= self.maxPrefillPercent",
            message="initialPrefillPercent must lie within [minPrefillPercent, maxPrefillPercent]",
            holds=lambda s: s.min_prefill_percent <= s.initial_prefill_percent <= s.max_prefill_percent,
        ),
        Rule(
            cel="self.minDecodePercent <= self.maxDecodePercent",
            message="minDecodePercent must not exceed maxDecodePercent",
            holds=lambda s: s.min_decode_percent <= s.max_decode_percent,
        ),
        Rule(
            cel="self.minDecodePercent <= self.initialDecodePercent && self.initialDecodePercent <= self.maxDecodePercent",
            message="initialDecodePercent must lie within [minDecodePercent, maxDecodePercent]",
            holds=lambda s: s.min_decode_percent <= s.initial_decode_percent <= s.max_decode_percent,
        ),
        Rule(
            cel="self.minPrefillPercent == self.maxPrefillPercent || self.stepPercent <= self.maxPrefillPercent - self.minPrefillPercent",
            message="stepPercent must not exceed the range maxPrefillPercent - minPrefillPercent",
            holds=lambda s: (
                s.min_prefill_percent == s.max_prefill_percent
                or s.step_percent <= s.max_prefill_percent - s.min_prefill_percent
            ),
        ),
    )

    enabled: bool = True
    """Run prefill and decode as separate workers with separate compute shares and let the autoscaler move the split."""

    initial_prefill_percent: int = Field(default=80, ge=1, le=100)
    """Prefill worker's compute share at start (Semi-PD's default is 80)."""

    initial_decode_percent: int = Field(default=100, ge=1, le=100)
    """Decode worker's compute share at start (shares may sum past 100, as MPS allows)."""

    min_prefill_percent: int = Field(default=20, ge=1, le=100)
    """Lowest prefill share the autoscaler may set."""

    max_prefill_percent: int = Field(default=100, ge=1, le=100)
    """Highest prefill share the autoscaler may set."""

    min_decode_percent: int = Field(default=20, ge=1, le=100)
    """Lowest decode share the autoscaler may set. Lowering it gives prefill more of a shared device while
    inter-token latency has slack; set it to `maxDecodePercent` to move only the prefill share."""

    max_decode_percent: int = Field(default=100, ge=1, le=100)
    """Highest decode share the autoscaler may set."""

    step_percent: int = Field(default=10, ge=1, le=50)
    """Largest change of either share in one decision."""


class SLOSpec(ApiModel):
    """Latency objectives the autoscaler keeps."""

    ttft_p99: Duration
    """99th-percentile time to first token, e.g. `2s`."""

    itl_p99: Duration
    """99th-percentile inter-token latency, e.g. `80ms`."""

    attainment_target: float = Field(default=0.99, ge=0.5, le=1.0)
    """Fraction of requests that must meet both objectives."""

    window: Duration = "1m"
    """Window over which percentiles are computed from Prometheus."""


class AutoscalingMode(StrEnum):
    """What the autoscaler may change."""

    SEMIPD = "semipd"
    REPLICAS = "replicas"
    OFF = "off"


class AutoscalingSpec(ApiModel):
    """How and how often the operator resizes splits and replicas."""

    mode: AutoscalingMode = AutoscalingMode.SEMIPD
    """`semipd` (split first, then replicas), `replicas` (replicas only), or `off`."""

    interval: Duration = "15s"
    """How often observations are taken and the plan is recomputed."""

    scale_up_stabilization: Duration = "0s"
    """How long a scale-out signal must persist before replicas are added."""

    scale_down_stabilization: Duration = "5m"
    """How long both SLOs must have slack before replicas are removed."""

    pending_timeout: Duration = "2m"
    """How long new pods may stay unschedulable before their demand moves to the next node pool."""

    prometheus_url: str | None = Field(
        default=None, alias="prometheusURL", max_length=2048, pattern=r"^https?://[^\s/]+(/\S*)?$"
    )
    """Prometheus to query for this pool instead of the operator's default."""


# --------------------------------------------------------------------------- placement


class KVCachePolicy(StrEnum):
    """How long-context requests are steered between node pools."""

    HEADROOM = "headroom"
    OFF = "off"


class KVCachePlacementSpec(ApiModel):
    """Which node pools serve which context lengths."""

    long_context_threshold: int = Field(default=32768, ge=256, le=10_000_000)
    """Prompts longer than this (tokens) go to the node pools with the most KV-cache headroom per replica (a threshold at or above model.maxContextLength turns steering off)."""

    policy: KVCachePolicy = KVCachePolicy.HEADROOM
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

    failure_mode: FailureMode = FailureMode.FAIL_OPEN
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


# --------------------------------------------------------------------------- spec


class InferencePoolSpec(ApiModel):
    """Desired state of a semi-PD inference fleet."""

    __rules__ = (
        Rule(
            cel="size(self.nodePools) >= 1",
            message="at least one node pool is required",
            holds=lambda s: len(s.node_pools) >= 1,
            field_path=".nodePools",
        ),
        Rule(
            cel="self.nodePools.all(p, self.nodePools.exists_one(q, q.name == p.name))",
            message="node pool names must be unique",
            holds=lambda s: len({p.name for p in s.node_pools}) == len(s.node_pools),
            field_path=".nodePools",
        ),
        Rule(
            cel="!self.placement.experts.enabled || self.model.architecture == 'moe'",
            message="expert placement needs an moe model",
            holds=lambda s: not s.placement.experts.enabled or s.model.architecture == Architecture.MOE,
            field_path=".placement.experts.enabled",
        ),
        Rule(
            cel="self.autoscaling.mode != 'semipd' || self.semiPD.enabled",
            message="autoscaling.mode semipd moves splits, so it needs semiPD.enabled (or use mode replicas)",
            holds=lambda s: s.autoscaling.mode != AutoscalingMode.SEMIPD or s.semi_pd.enabled,
            field_path=".autoscaling.mode",
        ),
    )

    model: ModelSpec
    """The model served."""

    engine: EngineSpec
    """The engine and its container settings (node pools may override parts)."""

    node_pools: list[NodePool] = Field(
        min_length=1,
        max_length=8,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    """Node pools replicas may run on (1 to 8, unique names)."""

    semi_pd: SemiPDSpec = Field(default_factory=SemiPDSpec, alias="semiPD")
    """Prefill/decode split control."""

    slo: SLOSpec
    """Latency objectives."""

    autoscaling: AutoscalingSpec = Field(default_factory=AutoscalingSpec)
    """Autoscaler settings."""

    placement: PlacementSpec = Field(default_factory=PlacementSpec)
    """KV-cache and expert placement."""

    routing: RoutingSpec = Field(default_factory=RoutingSpec)
    """Router integration (Gateway API Inference Extension)."""

    def node_pool(self, name: str) -> NodePool:
        """The node pool called `name` (KeyError if absent)."""
        for pool in self.node_pools:
            if pool.name == name:
                return pool
        raise KeyError(name)

    def effective_engine(self, pool: NodePool) -> EngineSpec:
        """The engine a node pool runs: the pool-wide spec with the pool's override applied."""
        if pool.engine is None:
            return self.engine
        fields = ("kind", "image", "args", "env", "resources")
        changes = {f: getattr(pool.engine, f) for f in fields if getattr(pool.engine, f) is not None}
        return self.engine.model_copy(update=changes)


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
    """What was done, e.g. `SplitChange`, `ScaleOut`, `ScaleIn`, `PoolFallback`, `Hold`."""

    node_pool: str | None = Field(default=None, max_length=40)
    """Node pool affected."""

    reason: str = Field(max_length=128, pattern=r"^[A-Za-z][A-Za-z0-9]*$")
    """Machine-readable CamelCase reason."""

    message: str = Field(default="", max_length=1024)
    """Human-readable detail."""

    details: dict[str, Annotated[str, Field(max_length=256)]] = Field(default_factory=dict, max_length=16)
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


class InferencePool(BaseModel):
    """An elastic semi-PD LLM inference fleet across NVIDIA GPU and Huawei Ascend node pools."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, use_attribute_docstrings=True)

    api_version: Literal["semipd.io/v1alpha1"] = "semipd.io/v1alpha1"
    kind: Literal["InferencePool"] = "InferencePool"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: InferencePoolSpec
    status: InferencePoolStatus | None = None
