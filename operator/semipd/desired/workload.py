"""The Deployment of one node pool: the engine driver's pod parts wrapped by the semi-PD agent.

Deployment, not StatefulSet: replicas are interchangeable (weights come from the model source,
the KV cache is per-process memory, the split lives in the agent), so stable identity or
per-replica volumes buy nothing and would slow rollouts (docs/workloads.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from semipd.api.v1alpha1 import SIMULATED, Accelerator, NodePool
from semipd.desired import names
from semipd.desired.owner import Owner
from semipd.engines import wrapper
from semipd.engines.base import AGENT_PYZ, AGENT_RUN_DIR, EngineContext, EngineDriver

MPS_PIPE_DIR = f"{AGENT_RUN_DIR}/mps-pipe"
MPS_LOG_DIR = f"{AGENT_RUN_DIR}/mps-log"
ENGINE_CONTAINER = "engine"
DRAIN_DELAY_S = 5
"""After SIGTERM the agent keeps admitting this long (readiness already off) so routers stop first."""


@dataclass(frozen=True)
class WorkloadSettings:
    """Operator-wide knobs of every workload (from the operator's config, not the spec)."""

    operator_image: str = "semipd-operator:0.1.0"
    """Image carrying the agent (init container) and the simulated engine."""

    termination_grace_seconds: int = 60
    """Grace period; the agent drains requests for all but the last 10 s of it."""

    pod_annotations: dict[str, str] = field(default_factory=dict)
    """Extra pod annotations (e.g. the local kubelet's opt-in in e2e)."""


def _restricted(non_root: bool) -> dict[str, Any]:
    ctx: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if non_root:
        ctx |= {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532, "readOnlyRootFilesystem": True}
    return ctx


def _agent_probe(timing_from: dict[str, Any], port: int) -> dict[str, Any]:
    """The agent's /readyz with the driver's timing (how long this engine may take to start)."""
    timing = {k: v for k, v in timing_from.items() if k not in {"httpGet", "tcpSocket", "exec", "grpc"}}
    return {"httpGet": {"path": "/readyz", "port": port, "scheme": "HTTP"}, **timing}


def restart_lame_duck_s(readiness: dict[str, Any]) -> int:
    """Restart mode: how long the agent keeps serving with readiness off before it drains and relaunches.
    The kubelet marks the pod NotReady only after failureThreshold failed probes, one per period, and
    routers then drop it; a shorter wait sends requests to an engine that is already gone."""
    return int(readiness.get("periodSeconds", 10)) * int(readiness.get("failureThreshold", 3)) + DRAIN_DELAY_S


def token_hash(token: str) -> str:
    """A short digest of the agent token: a pod-template annotation, so a rotated token rolls the pods."""
    return hashlib.sha256(token.encode()).hexdigest()[:16]


def workload(
    owner: Owner,
    ctx: EngineContext,
    driver: EngineDriver,
    *,
    replicas: int | None,
    token_digest: str,
    settings: WorkloadSettings,
) -> dict[str, Any]:
    """The complete Deployment (server-side-apply intent) of one node pool.

    `replicas=None` (autoscaling.mode external) leaves `spec.replicas` out of the intent, so the
    operator neither sets nor reverts it: an HPA or KEDA owns it."""
    node_pool, engine = ctx.node_pool, ctx.engine
    parts = driver.parts(ctx)
    grace = settings.termination_grace_seconds
    accel = {node_pool.effective_resource_name(): str(node_pool.accelerators_per_replica)}
    resources: dict[str, Any] = {
        "requests": {**{k: str(v) for k, v in engine.resources.requests.items()}, **accel},
        "limits": {**{k: str(v) for k, v in engine.resources.limits.items()}, **accel},
    }
    agent_vols, agent_mounts = wrapper.agent_volumes(names.token_secret_name(owner.name))
    env = list(parts.env)
    if driver.needs_mps and node_pool.accelerator == Accelerator.NVIDIA:
        env += [
            {"name": "CUDA_MPS_PIPE_DIRECTORY", "value": MPS_PIPE_DIR},
            {"name": "CUDA_MPS_LOG_DIRECTORY", "value": MPS_LOG_DIR},
        ]
    readiness = _agent_probe(parts.readiness_probe, ctx.engine.ports.admin)
    command = [
        "python3",
        AGENT_PYZ,
        *wrapper.agent_args(driver, ctx),
        "--drain-delay",
        str(DRAIN_DELAY_S),
        "--restart-drain-seconds",
        str(restart_lame_duck_s(readiness)),
        "--drain-timeout",
        str(max(5, grace - DRAIN_DELAY_S - 10)),
        "--",
        *parts.command,
    ]
    container = {
        "name": ENGINE_CONTAINER,
        "image": engine.image or settings.operator_image,
        "command": command,
        "env": env,
        "ports": [*parts.ports, wrapper.agent_port(ctx)],
        "resources": resources,
        "volumeMounts": [*parts.volume_mounts, *agent_mounts],
        # Readiness and start-up ask the agent's /readyz: it is off while the engine starts, while
        # the agent drains, and during a restart-mode split change (the engine's own health is not).
        "startupProbe": _agent_probe(parts.startup_probe, ctx.engine.ports.admin),
        "readinessProbe": readiness,
        # Liveness asks the agent, not the engine: a busy engine must not be killed mid-batch.
        "livenessProbe": wrapper.agent_liveness_probe(ctx),
        "securityContext": _restricted(non_root=engine.kind in SIMULATED),
    }
    init = {
        **wrapper.agent_init_container(settings.operator_image),
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
        "securityContext": _restricted(non_root=True),
    }
    annotations = {
        **settings.pod_annotations,
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(parts.metrics_port),
        "prometheus.io/path": parts.metrics_path,
        "prometheus.io/scheme": parts.metrics_scheme,
        names.AGENT_METRICS_PORT_ANNOTATION: str(ctx.engine.ports.admin),
        names.TOKEN_HASH_ANNOTATION: token_digest,
    }
    pod_spec: dict[str, Any] = {
        "initContainers": [init],
        "containers": [container],
        "volumes": [*parts.volumes, *agent_vols],
        "terminationGracePeriodSeconds": grace,
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": names.node_pool_selector(owner.name, node_pool)},
            }
        ],
    }
    if node_pool.node_selector:
        pod_spec["nodeSelector"] = dict(node_pool.node_selector)
    if node_pool.tolerations:
        pod_spec["tolerations"] = [t.model_dump(by_alias=True, exclude_none=True) for t in node_pool.tolerations]
    labels = names.pod_labels(owner.name, node_pool)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": owner.metadata(names.workload_name(owner.name, node_pool.name), names.pool_labels(owner.name)),
        "spec": {
            **({} if replicas is None else {"replicas": replicas}),
            "selector": {"matchLabels": names.node_pool_selector(owner.name, node_pool)},
            # Surge, never unavailable: a rollout must not take the pool below its ready minimum.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "revisionHistoryLimit": 5,
            "progressDeadlineSeconds": 1800,
            "template": {"metadata": {"labels": labels, "annotations": annotations}, "spec": pod_spec},
        },
    }


def desired_replicas(node_pool: NodePool, current: int | None, decided: int | None) -> int:
    """Replicas to apply: the autoscaler's decision, else what runs now, clamped to the pool's bounds."""
    want = decided if decided is not None else (current if current is not None else node_pool.min_replicas)
    return max(node_pool.min_replicas, min(node_pool.max_replicas, want))


REPLICAS_HANDOVER_SUFFIX = "-replicas-handover"
"""Field-manager suffix that holds `spec.replicas` while an external autoscaler takes it over."""


def _owns_replicas(entry: Mapping[str, Any]) -> bool:
    return "f:replicas" in ((entry.get("fieldsV1") or {}).get("f:spec") or {})


def replicas_handover(live: Mapping[str, Any] | None, manager: str) -> dict[str, Any] | None:
    """The partial apply that keeps a Deployment's current `spec.replicas` when we stop owning it.

    Server-side apply deletes a field its only manager stops applying, and a Deployment without
    `spec.replicas` defaults to 1: switching a pool to autoscaling.mode external would drop every
    node pool to one replica before the HPA acts. So, while our manager is the field's only owner,
    a second manager (`manager` + REPLICAS_HANDOVER_SUFFIX) applies the value it has now; an HPA's
    or `kubectl scale`'s first update then takes the field from both. None when nothing is needed.
    """
    if live is None or "replicas" not in (live.get("spec") or {}):
        return None
    meta = live.get("metadata") or {}
    owners = {m.get("manager") for m in meta.get("managedFields") or [] if _owns_replicas(m)}
    if owners != {manager}:
        return None  # someone else (an HPA, kubectl scale, the handover manager) already holds it
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        "spec": {"replicas": int(live["spec"]["replicas"])},
    }


def intent_digest(obj: dict[str, Any]) -> str:
    """Stable digest of an apply intent (for 'did our intent change' bookkeeping)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]
