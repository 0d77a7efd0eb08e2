"""The KV-cache placement's part of each autoscaler evaluation (imperative shell).

The evaluation observes (`observe.kvcache`: ready replicas, mean KV usage, long-prompt share per
node pool) and decides (`plan_kv_placement`, pure) with the other policies; this module publishes:
`view.kv_cache` (status, and the HTTPRoute weights reconcile builds from it), a `KVPlacement`
decision and Event when the long-context pools change, and the llm-d context-length-range label on
the live Ready pods (only those whose value differs). Reconcile also
labels, so a pod that just became Ready is labelled without waiting for the next evaluation.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes.aio.client import ApiException

from semipd.api.timestamps import rfc3339
from semipd.api.v1alpha1 import Decision, InferencePoolSpec, KVCachePlacementStatus
from semipd.controller import metrics
from semipd.controller.view import AutoscaleView
from semipd.desired import names
from semipd.desired.routing import CONTEXT_RANGE_LABEL, pod_label_patches
from semipd.observe.fleet import pod_ready
from semipd.policy.kvcache import KVPoolObservation, plan_kv_placement, steers

ACTION = "KVPlacement"
POD = "v1/Pod"
Logger = logging.Logger | logging.LoggerAdapter[Any]


def placement_in_force(view: AutoscaleView | None, status: Mapping[str, Any] | None) -> KVCachePlacementStatus | None:
    """This process's last placement, else the one recorded in status (so a restart keeps the choice)."""
    if view is not None and view.kv_cache is not None:
        return view.kv_cache
    recorded = ((status or {}).get("placement") or {}).get("kvCache")
    if not recorded:
        return None
    try:
        return KVCachePlacementStatus.model_validate(recorded)
    except ValueError:
        return None


def placement_decision(
    previous: KVCachePlacementStatus | None, new: KVCachePlacementStatus, now: float
) -> Decision | None:
    """The decision to record when the long-context pools changed under steering (None otherwise)."""
    before = list(previous.long_context_pools) if previous is not None else []
    if before == list(new.long_context_pools) or not (steers(new) or steers(previous)):
        return None
    details = {
        "longContextPools": ",".join(new.long_context_pools) or "-",
        "previous": ",".join(before) or "-",
        "threshold": str(new.threshold),
    }
    if new.long_request_share is not None:
        details["longRequestShare"] = f"{new.long_request_share:.3f}"
    for p in new.pools[:12]:
        headroom = "unknown" if p.headroom_tokens is None else str(p.headroom_tokens)
        details[f"pool-{p.name}"] = (
            f"headroom {headroom}/{p.capacity_tokens} long {p.long_weight}% short {p.short_weight}%"
        )
    return Decision(
        time=rfc3339(now),
        action=ACTION,
        node_pool=new.long_context_pools[0] if len(new.long_context_pools) == 1 else None,
        reason=new.reason,
        message=new.message[:1024],
        details=details,
    )


async def label_pods(
    ctx: Any, namespace: str, name: str, placement: KVCachePlacementStatus | None, logger: Logger
) -> int:
    """Put each live Ready pod's context-length-range label in line with `placement`; returns pods patched."""
    pods: Sequence[dict[str, Any]] = ctx.cache.labelled(POD, namespace, {names.POOL_LABEL: name})
    live = [p for p in pods if pod_ready(p) and not p["metadata"].get("deletionTimestamp")]
    patched = 0
    for body in pod_label_patches(live, placement):
        pod = body["metadata"]["name"]
        try:
            updated = await ctx.children.apply(body)
        except ApiException as err:  # gone or replaced meanwhile: the next evaluation sees the new pod
            logger.warning("could not label pod %s/%s with %s: %s", namespace, pod, CONTEXT_RANGE_LABEL, err.reason)
            continue
        ctx.cache.put(POD, updated)
        patched += 1
    return patched


def decide_kv_placement(
    spec: InferencePoolSpec,
    observed: Mapping[str, KVPoolObservation],
    view: AutoscaleView | None,
    status: Mapping[str, Any] | None,
    now: float,
) -> tuple[KVCachePlacementStatus, Decision | None]:
    """The placement to publish and the decision to record, from one observation (pure)."""
    previous = placement_in_force(view, status)
    new = plan_kv_placement(spec, observed, previous, rfc3339(now))
    return new, placement_decision(previous, new, now)


async def publish_kv_placement(
    ctx: Any,
    body: Mapping[str, Any],
    view: AutoscaleView,
    new: KVCachePlacementStatus,
    decision: Decision | None,
    logger: Logger,
) -> None:
    """Publish one evaluation's KV-cache placement: into `view` (status, HTTPRoute), a decision, the pods."""
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    view.kv_cache = new
    if decision is not None:
        view.decisions.append(decision)
        metrics.DECISIONS.labels(namespace=namespace, pool=name, action=ACTION, reason=new.reason).inc()
        await ctx.events.post(dict(body), "Normal", ACTION, f"{new.reason}: {new.message}")
    await label_pods(ctx, namespace, name, new, logger)
