"""One idempotent, level-based reconcile of an InferencePool (the imperative shell).

Every trigger (create/resume/update, a child's watch event, the periodic resync) ends here. It
reads the pool and its children from the watch caches, validates, builds the desired children,
applies only what is missing or drifted (server-side apply, one field manager), prunes what is no
longer wanted, and writes status only when it changed. An invalid spec never touches children.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from semipd.api.semantics import CapabilitiesOf, NodeInfo, SpecProblem, Taint
from semipd.api.v1alpha1 import AutoscalingMode, ConditionStatus, InferencePoolSpec, InferencePoolStatus
from semipd.controller import conditions as c
from semipd.controller import metrics
from semipd.controller.agents import AgentClient, ready_pod_ips
from semipd.controller.apiclient import client_closed
from semipd.controller.cache import DEPLOYMENT, Key, ObjectCache
from semipd.controller.config import OperatorConfig
from semipd.controller.drift import carries
from semipd.controller.evaluate import Evaluation, evaluate
from semipd.controller.kube import ChildClient, EventRecorder, PoolClient
from semipd.controller.kvplacement import label_pods, placement_in_force
from semipd.controller.liveness import Liveness
from semipd.controller.plan import UNWATCHED, conflict_message, conflict_with, key_of, plan_children
from semipd.controller.pooltasks import PoolTasks
from semipd.controller.rollout import Verdict, pool_health
from semipd.controller.tokens import pool_token
from semipd.controller.view import AutoscaleView
from semipd.desired import names
from semipd.desired.children import TOKEN_KEY
from semipd.desired.owner import Owner
from semipd.desired.pool import desired_children
from semipd.desired.workload import (
    REPLICAS_HANDOVER_SUFFIX,
    WorkloadSettings,
    desired_replicas,
    intent_digest,
    replicas_handover,
    token_hash,
)
from semipd.engines import DriverError, get_driver
from semipd.observe.prometheus import PrometheusSource

_WARN_WHEN = {
    c.INVALID_SPEC: ConditionStatus.TRUE,
    c.DEGRADED: ConditionStatus.TRUE,
    c.READY: ConditionStatus.FALSE,
    c.SLO_MET: ConditionStatus.FALSE,
    c.METRICS_AVAILABLE: ConditionStatus.FALSE,
}
POD = "v1/Pod"
Logger = logging.Logger | logging.LoggerAdapter[Any]


def now_rfc3339() -> str:
    """Current time as metav1.Time renders it (seconds precision, Z)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_info(body: dict[str, Any]) -> NodeInfo:
    """The NodeInfo of a Node object."""
    meta, spec, status = body.get("metadata", {}), body.get("spec") or {}, body.get("status") or {}
    taints = spec.get("taints") or []
    return NodeInfo(
        name=meta.get("name", ""),
        labels=dict(meta.get("labels") or {}),
        allocatable={k: str(v) for k, v in (status.get("allocatable") or {}).items()},
        taints=tuple(Taint(t.get("key", ""), t.get("value", ""), t.get("effect", "NoSchedule")) for t in taints),
        unschedulable=bool(spec.get("unschedulable")),
    )


@dataclass
class OperatorContext:
    """Operator-wide state kept in Kopf's memo: clients, watch caches, bookkeeping, health."""

    config: OperatorConfig
    pools: PoolClient
    children: ChildClient
    events: EventRecorder
    agents: AgentClient
    capabilities_of: CapabilitiesOf
    token_key: bytes
    settings: WorkloadSettings
    cache: ObjectCache = field(default_factory=ObjectCache)
    pool_bodies: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    nodes: dict[str, NodeInfo] = field(default_factory=dict)
    gie_installed: bool = False
    httproute_installed: bool = False
    applied_digests: dict[Key, str] = field(default_factory=dict)
    autoscale: dict[tuple[str, str], AutoscaleView] = field(default_factory=dict)
    prometheus: dict[str, PrometheusSource] = field(default_factory=dict)
    locks: dict[tuple[str, str], asyncio.Lock] = field(default_factory=dict)
    pending: set[tuple[str, str]] = field(default_factory=set)
    listing_since: dict[tuple[str, str], float] = field(default_factory=dict)
    """Since when each pool's evaluation waits for its children to be listed (autoscale._still_listing)."""
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    last_success: float = field(default_factory=time.monotonic)
    liveness: Liveness = field(default_factory=lambda: Liveness(stale_after=300.0))
    close: Callable[[], Any] | None = None
    stopping: bool = False
    """Set when the operator begins to stop: a call cut off from then on is the shutdown, not a failure."""

    @property
    def known_pools(self) -> set[tuple[str, str]]:
        return set(self.pool_bodies)

    def lock(self, key: tuple[str, str]) -> asyncio.Lock:
        """One lock per InferencePool so triggers never interleave."""
        return self.locks.setdefault(key, asyncio.Lock())

    def poke(self, namespace: str, name: str) -> None:
        """Ask the resync loop to reconcile one pool soon (a child changed)."""
        self.pending.add((namespace, name))
        self.wake.set()


def _normalized(status: dict[str, Any] | None) -> dict[str, Any]:
    return InferencePoolStatus.model_validate(status or {}).model_dump(by_alias=True, exclude_none=True, mode="json")


def _forget(ctx: OperatorContext, key: tuple[str, str]) -> None:
    ctx.pool_bodies.pop(key, None)
    ctx.autoscale.pop(key, None)
    ctx.listing_since.pop(key, None)


async def _write_status(ctx: OperatorContext, body: dict[str, Any], result: Evaluation) -> None:
    meta = body["metadata"]
    patch = result.status_patch()
    key = (meta["namespace"], meta["name"])
    if patch != _normalized(body.get("status")):
        if not await ctx.pools.patch_status(*key, patch):
            # Deleted while this evaluation ran (its children go with it, GC); a pool re-created
            # under the name meanwhile is another object and stays known.
            cached = ctx.pool_bodies.get(key)
            if cached is None or cached.get("metadata", {}).get("uid") == meta.get("uid"):
                _forget(ctx, key)
            return
        ctx.pool_bodies[key] = {**body, "status": patch}
    for t in result.transitions:
        kind = "Warning" if _WARN_WHEN.get(t.type) == t.new.status else "Normal"
        await ctx.events.post(body, kind, t.new.reason, f"{t.type}={t.new.status.value}: {t.new.message}")


def _build(
    ctx: OperatorContext, owner: Owner, spec: InferencePoolSpec, status: dict[str, Any] | None
) -> list[dict[str, Any]]:
    # The last decision is the autoscaler's (or, after a restart, the one recorded in our status), never
    # read back from the Deployment: a hand edit of a Deployment's replicas is drift to revert.
    decided = {p.get("name"): p.get("desiredReplicas") for p in (status or {}).get("nodePools") or []}
    view = ctx.autoscale.get((owner.namespace, owner.name))
    if view is not None and view.replicas is not None:
        decided.update(view.replicas)
    external = spec.autoscaling.mode == AutoscalingMode.EXTERNAL  # an HPA or KEDA owns replicas
    replicas: dict[str, int | None] = {
        np.name: None if external else desired_replicas(np, decided.get(np.name), None) for np in spec.node_pools
    }
    token = pool_token(ctx.token_key, owner.namespace, owner.name, owner.uid)
    return desired_children(
        owner, spec, token=token, replicas=replicas, settings=ctx.settings, gie_installed=ctx.gie_installed,
        httproute_installed=ctx.httproute_installed, kv_cache=placement_in_force(view, status),
    )  # fmt: skip


def _what_changed(cached: dict[str, Any] | None, live: dict[str, Any], since: str, manager: str) -> str | None:
    """'created', 'updated', or None when the apply was a no-op (nothing worth an Event)."""
    meta = live.get("metadata", {})
    if cached is not None:
        return "updated" if cached.get("metadata", {}).get("resourceVersion") != meta.get("resourceVersion") else None
    if str(meta.get("creationTimestamp", "")) >= since:
        return "created"
    ours = [m for m in meta.get("managedFields") or [] if m.get("manager") == manager and m.get("operation") == "Apply"]
    # After a restart the cache may still be empty: our managed-fields time says whether this apply changed anything.
    return "updated" if any(str(m.get("time", "")) >= since for m in ours) else None


async def _hand_over_replicas(ctx: OperatorContext, namespace: str, name: str, spec: InferencePoolSpec) -> None:
    """Keep each Deployment's replicas while our manager lets go of them (see replicas_handover)."""
    for np in spec.node_pools:
        live = ctx.cache.get(DEPLOYMENT, namespace, names.workload_name(name, np.name))
        intent = replicas_handover(live, ctx.config.field_manager)
        if intent is not None:
            ctx.cache.put(DEPLOYMENT, await ctx.children.apply(intent, manager_suffix=REPLICAS_HANDOVER_SUFFIX))


def _stale_token(intent: dict[str, Any], deployments: list[dict[str, Any]]) -> bool:
    """Our Deployments' pods were rolled out with another token than `intent` carries (the key was rotated)."""
    token = base64.b64decode(intent["data"][TOKEN_KEY]).decode()
    have = {((d.get("spec") or {}).get("template") or {}).get("metadata", {}).get("annotations", {}).get(
        names.TOKEN_HASH_ANNOTATION) for d in deployments}  # fmt: skip
    return bool(have - {token_hash(token)})


async def _check_owner(
    ctx: OperatorContext, owner: Owner, intent: dict[str, Any]
) -> tuple[bool, str | None, dict[str, Any] | None]:
    """(exists, conflict, the live object when it had to be read) for the object `intent` names,
    writing nothing to an existing object.

    Unwatched kinds (Secrets) are create-only, so for them the check is the create: a 409 means
    ours only if this pool already has a Deployment of ours (those are created after the Secret).
    If those Deployments run another token (a rotated key), our Secret is replaced: delete, create."""
    key = key_of(intent)
    if key[0] in UNWATCHED:
        if await ctx.children.create(intent) is not None:
            return True, None, None
        deployments = [body for _, body in ctx.cache.owned_by(owner.uid, DEPLOYMENT)]
        if not deployments:
            return True, conflict_message(f"{intent['kind']} {key[1]}/{key[2]}", owner.name, adoptable=False), None
        if _stale_token(intent, deployments):
            await ctx.children.delete(intent["apiVersion"], intent["kind"], key[1], key[2])
            await ctx.children.create(intent)
        return True, None, None
    live, found = ctx.cache.get(*key), None
    if live is None:
        api_version, _, kind = key[0].rpartition("/")
        live = found = await ctx.children.find(api_version, kind, key[1], key[2])
    return live is not None, conflict_with(live, owner.uid, owner.name), found


async def _converge(
    ctx: OperatorContext, body: dict[str, Any], owner: Owner, desired: list[dict[str, Any]]
) -> list[str]:
    """Apply and prune; returns the conflicts (objects left untouched). With a conflict nothing else is written."""
    owned = [k for k, _ in ctx.cache.owned_by(owner.uid)]
    plan = plan_children(desired, ctx.cache.objects, owned, ctx.applied_digests)
    started = now_rfc3339()
    checked = [(intent, *await _check_owner(ctx, owner, intent)) for intent in plan.apply]
    conflicts = [conflict for _, _, conflict, _ in checked if conflict]
    if conflicts:
        return conflicts
    for intent, exists, _, found in checked:
        key = key_of(intent)
        ctx.applied_digests[key] = intent_digest(intent)
        if key[0] in UNWATCHED:
            continue
        if found is not None and carries(intent, found):
            # Ours and unchanged, only not yet in the cache (a restarted operator reconciles before its
            # watches have listed everything): no apply (at 40 pools, 120 no-op patches per restart).
            ctx.cache.put(key[0], found)
            continue
        cached = ctx.cache.get(*key)
        # The first write is a create: an apply would merge into an object made meanwhile under that name.
        live = await ctx.children.apply(intent) if exists else await ctx.children.create(intent)
        if live is None:
            continue  # created by someone else since the check: the next reconcile reports it
        ctx.cache.put(key[0], live)
        verb = "created" if not exists else _what_changed(cached, live, started, ctx.config.field_manager)
        if verb:
            await ctx.events.post(body, "Normal", "Applied", f"{intent['kind']} {key[2]} {verb}")
    for kind, namespace, name in plan.prune:
        api_version, _, k = kind.rpartition("/")
        await ctx.children.delete(api_version, k, namespace, name)
        ctx.cache.drop(kind, namespace, name)
        await ctx.events.post(body, "Normal", "Pruned", f"{k} {name} deleted: no longer in the spec")
    return []


async def reconcile(ctx: OperatorContext, namespace: str, name: str, logger: Logger) -> None:
    """Bring one InferencePool's children and status to the desired state."""
    queued = time.perf_counter()
    # No operator-wide bound here: a reconcile mostly waits on the apiserver, and in the 500-pool soak
    # a bound of 8 tripled a spec storm's change-to-status time (bench/results/soak.md).
    async with ctx.lock((namespace, name)):
        started = time.perf_counter()
        metrics.RECONCILE_QUEUE_SECONDS.observe(started - queued)
        body = ctx.pool_bodies.get((namespace, name)) or await ctx.pools.get(namespace, name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            _forget(ctx, (namespace, name))
            return
        meta = body["metadata"]
        now = now_rfc3339()
        args = (body.get("spec") or {}, meta.get("generation"), body.get("status"), list(ctx.nodes.values()))
        result = evaluate(*args, ctx.capabilities_of, now, name=name, scrape_interval_s=ctx.config.scrape_interval)
        spec = result.spec
        if spec is not None and not result.problems:
            owner = Owner(name, namespace, meta["uid"])
            try:
                desired = _build(ctx, owner, spec, body.get("status"))
            except DriverError as err:
                result = evaluate(
                    *args,
                    ctx.capabilities_of,
                    now,
                    name=name,
                    extra_problems=[SpecProblem("spec.engine", str(err))],
                    scrape_interval_s=ctx.config.scrape_interval,
                )
            else:
                if spec.autoscaling.mode == AutoscalingMode.EXTERNAL:
                    await _hand_over_replicas(ctx, namespace, name, spec)
                conflicts = await _converge(ctx, body, owner, desired)
                kv_cache = placement_in_force(ctx.autoscale.get((namespace, name)), body.get("status"))
                await label_pods(ctx, namespace, name, kv_cache, logger)
                pods = ctx.cache.labelled(POD, namespace, {names.POOL_LABEL: name})
                token = pool_token(ctx.token_key, namespace, name, owner.uid)
                splits = await ctx.agents.splits(ready_pod_ips(pods), spec.engine.ports.admin, token)
                deployments = ctx.cache.deployments(namespace, name, (np.name for np in spec.node_pools))
                supported = {
                    np.name: get_driver(spec.effective_engine(np).kind).capabilities.supports_split
                    for np in spec.node_pools
                }
                health = pool_health(spec, name, deployments, pods, splits, supported)
                if conflicts:
                    health = replace(health, degraded=Verdict(True, "Conflict", "; ".join(conflicts)))
                result = evaluate(
                    *args,
                    ctx.capabilities_of,
                    now,
                    name=name,
                    health=health,
                    autoscale=ctx.autoscale.get((namespace, name)),
                    scrape_interval_s=ctx.config.scrape_interval,
                )
        await _write_status(ctx, body, result)
        if result.problems:
            metrics.INVALID_SPECS.inc()
            logger.warning("InvalidSpec: %s", "; ".join(str(p) for p in result.problems))
    ctx.last_success = time.monotonic()
    metrics.RECONCILES.labels(result="invalid" if result.problems else "ok").inc()
    metrics.RECONCILE_SECONDS.observe(time.perf_counter() - started)


async def _safe_reconcile(ctx: OperatorContext, key: tuple[str, str], logger: logging.Logger) -> None:
    try:
        await reconcile(ctx, key[0], key[1], logger)
    except asyncio.CancelledError:
        raise
    except Exception as err:
        if client_closed(err, ctx.stopping):  # shutdown, not a failure: the next process starts afresh
            logger.info("reconcile of %s/%s cut short: the operator is stopping", *key)
            return
        metrics.RECONCILES.labels(result="error").inc()
        logger.exception("reconcile of %s/%s failed; retrying on the next trigger", *key)


async def resync_forever(ctx: OperatorContext, logger: logging.Logger) -> None:
    """Reconcile pools whose children changed as soon as poked, and every pool each resync interval;
    pools run concurrently (bounded, each with a timeout), so one stuck pool holds up no other."""
    cfg = ctx.config
    tasks = PoolTasks(lambda key: _safe_reconcile(ctx, key, logger), limit=cfg.pool_concurrency,
                      timeout=cfg.pool_timeout, logger=logger, what="reconcile")  # fmt: skip
    try:
        await _resync_loop(ctx, tasks)
    finally:
        tasks.cancel()


async def _resync_loop(ctx: OperatorContext, tasks: PoolTasks) -> None:
    deadline = time.monotonic() + ctx.config.resync_interval
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ctx.wake.wait(), timeout=max(0.0, deadline - time.monotonic()))
        ctx.wake.clear()
        if time.monotonic() >= deadline:
            batch, deadline = set(ctx.known_pools), time.monotonic() + ctx.config.resync_interval
        else:
            await asyncio.sleep(0.2)  # coalesce a burst of child events into one reconcile
            batch = set(ctx.pending)
        ctx.pending.clear()
        for key in sorted(batch):
            tasks.submit(key)
