"""v1alpha1 API: what is served (`spec.model`) and by which engine (`spec.engine`, per-pool overrides)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field

from semipd.api.base import DNS_LABEL, DNS_SUBDOMAIN, ApiModel, Quantity
from semipd.api.rules import Rule

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

    architecture: Architecture = Field(default=Architecture.DENSE, strict=False)
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
    SGLANG = "sglang"
    VLLM = "vllm"
    VLLM_ASCEND = "vllm-ascend"
    MINDIE = "mindie"
    SIM = "sim"
    SIM_SEMIPD = "sim-semipd"


SIMULATED = frozenset({EngineKind.SIM, EngineKind.SIM_SEMIPD})
"""The simulated engine kinds: they run `semipd sim-engine` from the agent image, no engine image."""


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


RESERVED_ENV = ("POD_IP", "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY")
"""Variables the operator sets on every engine container: the agent binds to POD_IP, MPS finds its daemon by these."""
RESERVED_ENV_PREFIX = "SEMIPD_"


class EnvVar(ApiModel):
    """An extra environment variable for the engine container."""

    __rules__ = (
        Rule(
            cel=f"!(self.name in {list(RESERVED_ENV)}) && !self.name.startsWith('{RESERVED_ENV_PREFIX}')",
            message=f"name is reserved for the operator and its agent ({', '.join(RESERVED_ENV)}, "
            f"{RESERVED_ENV_PREFIX}*)",
            holds=lambda e: e.name not in RESERVED_ENV and not e.name.startswith(RESERVED_ENV_PREFIX),
            field_path=".name",
        ),
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
            cel="self.kind in ['sim', 'sim-semipd'] || has(self.image)",
            message="image is required unless kind is sim or sim-semipd",
            holds=lambda e: e.kind in SIMULATED or e.image is not None,
        ),
    )

    kind: EngineKind = Field(default=EngineKind.SGLANG_SEMIPD, strict=False)
    """`sglang-semipd` (Semi-PD SGLang fork), `sglang` (upstream SGLang PD-Multiplexing), `vllm`, `vllm-ascend`, `mindie`, `sim` (the simulated engine, standby-swap split changes) or `sim-semipd` (the simulated engine as Semi-PD `main` runs: the split is fixed at launch, a change restarts the engine after a drain)."""

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

    kind: EngineKind | None = Field(default=None, strict=False)
    """Engine kind for this node pool."""

    image: str | None = Field(default=None, min_length=1, max_length=1024)
    """Engine image for this node pool."""

    args: list[Annotated[str, Field(max_length=4096)]] | None = Field(default=None, max_length=64)
    """Replaces `engine.args` for this node pool."""

    env: list[EnvVar] | None = Field(default=None, max_length=64)
    """Replaces `engine.env` for this node pool."""

    resources: ResourceRequirements | None = None
    """Replaces `engine.resources` for this node pool."""
