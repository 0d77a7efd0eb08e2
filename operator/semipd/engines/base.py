"""The engine-driver contract: what one engine kind contributes to a replica's pod, and what it can do.

A driver is a frozen, declarative object. Its pod-template parts are pure functions of the API spec
(an EngineContext) returning plain dicts in Kubernetes JSON shape; its metric set names the
Prometheus series it exports. Capabilities come from the operator-wide table (engines.capabilities)
and the in-pod agent's driver of the same kind, so no fact is stated twice. The full Deployment is
assembled elsewhere from these parts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from semipd.agent.drivers import DRIVERS as AGENT_DRIVERS
from semipd.api.v1alpha1 import EngineKind, EngineSpec, InferencePoolSpec, ModelSpec, NodePool
from semipd.engines import k8s
from semipd.engines.capabilities import EngineCapabilities, capabilities_of
from semipd.engines.promql import MetricSet

POD_IP_ENV = "POD_IP"
POD_IP = f"$({POD_IP_ENV})"
"""Kubernetes expands $(VAR) in command/args from the container env: every server binds the pod IP."""

MODEL_MOUNT = "/models"
"""Where the Deployment builder mounts pvc:// model volumes (claim name as the first path segment)."""

SHM_VOLUME = "dshm"
SHM_PATH = "/dev/shm"

AGENT_VOLUME = "semipd"
AGENT_DIR = "/semipd"
"""emptyDir shared by the agent-install init container and the engine container."""
AGENT_PYZ = f"{AGENT_DIR}/agent.pyz"
AGENT_RUN_DIR = f"{AGENT_DIR}/run"
"""The agent's --run-dir: control sockets, pid file, MPS pipe/log dirs."""


class DriverError(ValueError):
    """The spec asks for something this engine cannot do (reported in status, never faked)."""


@dataclass(frozen=True)
class EngineContext:
    """Everything a driver's pod parts depend on: the pool spec and the node pool being rendered."""

    spec: InferencePoolSpec
    node_pool: NodePool
    ascend_runtime_injects_mounts: bool = False
    """True on clusters with Ascend Docker Runtime, which injects the driver mounts itself."""
    engine_config_map: str = "semipd-engine-config"
    """Name of the ConfigMap the Deployment builder creates from EngineParts.files."""

    @classmethod
    def of(cls, spec: InferencePoolSpec, node_pool: str, **options: Any) -> EngineContext:
        return cls(spec, spec.node_pool(node_pool), **options)

    @property
    def engine(self) -> EngineSpec:
        return self.spec.effective_engine(self.node_pool)

    @property
    def model(self) -> ModelSpec:
        return self.spec.model

    @property
    def tp(self) -> int:
        return self.node_pool.accelerators_per_replica

    @property
    def http_port(self) -> int:
        return self.engine.ports.http


@dataclass(frozen=True)
class EngineFile:
    """A file the engine needs in its container (e.g. MindIE's config.json), delivered via a ConfigMap."""

    key: str
    """ConfigMap data key."""
    mount_path: str
    content: str


@dataclass(frozen=True)
class EngineParts:
    """The engine container's engine-specific parts, Kubernetes JSON shape."""

    command: list[str]
    """The engine's own command line (the agent wrapper goes in front of it)."""
    env: list[dict[str, Any]]
    ports: list[dict[str, Any]]
    readiness_probe: dict[str, Any]
    startup_probe: dict[str, Any]
    volumes: list[dict[str, Any]]
    volume_mounts: list[dict[str, Any]]
    files: list[EngineFile] = field(default_factory=list)
    metrics_port: int = 0
    metrics_path: str = "/metrics"
    metrics_scheme: str = "http"


def model_location(model: ModelSpec, *, local_only: bool = False) -> str:
    """What the engine's --model-path gets for the model's source URI.

    hf://org/name -> "org/name" (the engine downloads it), file:///p -> "/p",
    pvc://claim/sub/dir -> "/models/claim/sub/dir"; s3:// is passed through (engines that support it
    stream it), unless `local_only`.
    """
    scheme, _, rest = model.source.partition("://")
    if scheme == "hf":
        if local_only:
            raise DriverError(f"this engine needs local weights; {model.source} is a hub id (use file:// or pvc://)")
        return rest.strip("/")
    if scheme == "file":
        return "/" + rest.lstrip("/")
    if scheme == "pvc":
        return f"{MODEL_MOUNT}/{rest.strip('/')}"
    if local_only:
        raise DriverError(f"this engine needs local weights; {model.source} is remote (use file:// or pvc://)")
    return model.source


@dataclass(frozen=True)
class EngineDriver:
    """Base of every driver: the declarative facts plus the pure pod-part builders they share."""

    kind: str
    metrics: MetricSet
    health_path: str | None
    """Engine readiness path on the HTTP port (None: a TCP check)."""
    startup_seconds: int = 900
    """How long the startup probe allows for weight loading and warm-up."""

    @property
    def capabilities(self) -> EngineCapabilities:
        """Accelerators, switch mode, expert rebalancing: the operator-wide table (engines.capabilities)."""
        return capabilities_of(EngineKind(self.kind))

    @property
    def needs_mps(self) -> bool:
        """Whether the pod runs an MPS control daemon: the in-pod agent's driver decides."""
        return AGENT_DRIVERS[self.kind].needs_mps

    @property
    def split_unsupported_reason(self) -> str:
        """Why there is no split (for status), from the in-pod agent's driver; empty if there is one."""
        return AGENT_DRIVERS[self.kind].unsupported_reason

    # --- to override ------------------------------------------------------------------------------

    def engine_command(self, ctx: EngineContext) -> list[str]:
        raise NotImplementedError

    def driver_env(self, ctx: EngineContext) -> list[dict[str, Any]]:
        return []

    def driver_volumes(self, ctx: EngineContext) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(volumes, mounts) the engine needs beyond shared memory."""
        return [], []

    def files(self, ctx: EngineContext) -> list[EngineFile]:
        return []

    def metrics_port(self, ctx: EngineContext) -> int:
        return ctx.engine.ports.metrics or ctx.http_port

    def extra_ports(self, ctx: EngineContext) -> list[dict[str, Any]]:
        return []

    # --- shared -----------------------------------------------------------------------------------

    def check(self, ctx: EngineContext) -> None:
        """Raise DriverError if the spec cannot run on this engine."""
        vendor = ctx.node_pool.accelerator
        if vendor not in self.capabilities.accelerators:
            raise DriverError(
                f"engine {self.kind} does not run on {vendor.value} node pools (node pool "
                f"{ctx.node_pool.name}); it supports {sorted(a.value for a in self.capabilities.accelerators)}"
            )

    def env(self, ctx: EngineContext) -> list[dict[str, Any]]:
        """POD_IP first (later entries may reference it), then the driver's, then the user's (which win)."""
        out = [k8s.env_field(POD_IP_ENV, "status.podIP"), *self.driver_env(ctx)]
        for e in ctx.engine.env:
            if e.value_from is not None:
                ref = e.value_from.secret_key_ref
                out.append(k8s.env_secret(e.name, ref.name, ref.key))
            else:
                out.append(k8s.env_value(e.name, e.value or ""))
        return k8s.dedupe_env(out)

    def ports(self, ctx: EngineContext) -> list[dict[str, Any]]:
        out = [k8s.container_port("http", ctx.http_port)]
        if ctx.engine.ports.metrics is not None and ctx.engine.ports.metrics != ctx.http_port:
            out.append(k8s.container_port("metrics", ctx.engine.ports.metrics))
        return out + self.extra_ports(ctx)

    def readiness_probe(self, ctx: EngineContext) -> dict[str, Any]:
        if self.health_path is None:
            return k8s.tcp_probe(ctx.http_port, period=5, failure_threshold=3)
        return k8s.http_probe(self.health_path, ctx.http_port, period=5, failure_threshold=3)

    def startup_probe(self, ctx: EngineContext) -> dict[str, Any]:
        period = 5
        threshold = max(1, -(-self.startup_seconds // period))
        if self.health_path is None:
            return k8s.tcp_probe(ctx.http_port, period=period, failure_threshold=threshold)
        return k8s.http_probe(self.health_path, ctx.http_port, period=period, failure_threshold=threshold)

    def parts(self, ctx: EngineContext) -> EngineParts:
        """All engine-specific pod parts for one node pool's replicas."""
        self.check(ctx)
        volumes, mounts = self.driver_volumes(ctx)
        files = self.files(ctx)
        if files:
            volumes = [*volumes, k8s.configmap_volume("engine-config", ctx.engine_config_map)]
            mounts = [
                *mounts,
                *(k8s.mount("engine-config", f.mount_path, sub_path=f.key, read_only=True) for f in files),
            ]
        return EngineParts(
            command=self.engine_command(ctx) + list(ctx.engine.args),
            env=self.env(ctx),
            ports=self.ports(ctx),
            readiness_probe=self.readiness_probe(ctx),
            startup_probe=self.startup_probe(ctx),
            volumes=[k8s.empty_dir(SHM_VOLUME, medium="Memory"), *volumes],
            volume_mounts=[k8s.mount(SHM_VOLUME, SHM_PATH), *mounts],
            files=files,
            metrics_port=self.metrics_port(ctx),
            metrics_path=self.metrics.path,
            metrics_scheme=self.metrics.scheme,
        )
