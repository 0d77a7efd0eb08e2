"""Pure health of a pool's workloads: replica counts, rollouts in flight, pods that cannot run.

Input is what the watch caches hold (Deployments and Pods as raw bodies) plus the splits read from
the agents; output is the per-node-pool status and the Ready/Progressing/Degraded verdicts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from semipd.api.v1alpha1 import InferencePoolSpec, NodePoolStatus, PodSplit
from semipd.desired import names

_BAD_WAITING = {
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "ImagePullBackOff",
    "ErrImagePull",
    "RunContainerError",
}


@dataclass(frozen=True)
class Verdict:
    """One condition's value as computed from the workloads."""

    status: bool
    reason: str
    message: str


@dataclass(frozen=True)
class PoolHealth:
    """Per node pool status and the pool-wide verdicts."""

    node_pools: list[NodePoolStatus]
    ready: Verdict
    progressing: Verdict
    degraded: Verdict


def _pod_problem(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    name = pod.get("metadata", {}).get("name", "?")
    status = pod.get("status") or {}
    for cond in status.get("conditions") or []:
        if (
            cond.get("type") == "PodScheduled"
            and cond.get("status") == "False"
            and cond.get("reason") == "Unschedulable"
        ):
            return "Unschedulable", f"pod {name}: {cond.get('message', 'unschedulable')}"
    for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in _BAD_WAITING:
            last = ((cs.get("lastState") or {}).get("terminated") or {}).get("exitCode")
            detail = f" (last exit code {last})" if last is not None else ""
            return str(waiting["reason"]), f"pod {name} container {cs.get('name')}: {waiting['reason']}{detail}"
    return None


def pool_health(
    spec: InferencePoolSpec,
    pool: str,
    deployments: Mapping[str, Mapping[str, Any] | None],
    pods: Sequence[Mapping[str, Any]],
    splits: Mapping[str, tuple[int, int]],
    split_supported: Mapping[str, bool],
) -> PoolHealth:
    """Status and verdicts from the cached Deployments (by node pool) and Pods of the InferencePool."""
    statuses: list[NodePoolStatus] = []
    short: list[str] = []
    rolling: list[str] = []
    problems: list[tuple[str, str]] = []
    for np in spec.node_pools:
        dep = deployments.get(np.name)
        dstatus = (dep or {}).get("status") or {}
        desired = int(((dep or {}).get("spec") or {}).get("replicas", 0))
        ready = int(dstatus.get("readyReplicas", 0))
        have = int(dstatus.get("replicas", 0))
        updated = int(dstatus.get("updatedReplicas", 0))
        generation = (dep or {}).get("metadata", {}).get("generation")
        seen = dstatus.get("observedGeneration")
        if dep is None or seen != generation or updated < desired or have > desired or ready < desired:
            rolling.append(f"{np.name} ({ready}/{desired} ready, {updated} updated)")
        if ready < np.min_replicas:
            short.append(f"{np.name} has {ready}/{np.min_replicas} ready")
        np_pods = [p for p in pods if (p.get("metadata", {}).get("labels") or {}).get(names.NODE_POOL_LABEL) == np.name]
        for p in np_pods:
            problem = _pod_problem(p)
            if problem:
                problems.append(problem)
        pod_names = sorted(p.get("metadata", {}).get("name", "") for p in np_pods)
        statuses.append(
            NodePoolStatus(
                name=np.name,
                accelerator=np.accelerator.value,
                engine=spec.effective_engine(np).kind.value,
                desired_replicas=desired,
                replicas=have,
                ready_replicas=ready,
                split_supported=split_supported.get(np.name, False),
                splits=[
                    PodSplit(pod=n, prefill_percent=splits[n][0], decode_percent=splits[n][1])
                    for n in pod_names
                    if n in splits
                ][:256],
            )
        )
    ready_v = (
        Verdict(False, "MinimumReplicasUnavailable", "; ".join(short))
        if short
        else Verdict(True, "MinimumReplicasReady", "every node pool has its minimum ready replicas")
    )
    progressing_v = (
        Verdict(True, "RollingOut", "rolling: " + "; ".join(rolling))
        if rolling
        else Verdict(False, "RolloutComplete", "every workload runs the current spec")
    )
    if problems:
        reasons = sorted({r for r, _ in problems})
        degraded_v = Verdict(True, reasons[0], "; ".join(m for _, m in problems)[:4000])
    else:
        degraded_v = Verdict(False, "AsExpected", "no pod is failing")
    return PoolHealth(statuses, ready_v, progressing_v, degraded_v)
