"""MoE expert placement actuation (imperative shell), one step of each autoscaler evaluation.

For every node pool of an InferencePool with `spec.placement.experts.enabled` on an `moe` model:
per-expert load over `rebalanceWindow` from Prometheus (the engine driver's PromQL) -> the load
matrix -> the worst layer's max/mean under the map in force, appended to the pool's imbalance
history -> `trigger.decide`. On a rebalance: the improved placement (policy/experts, off the event
loop), the next version's ConfigMap (server-side apply), then either every Ready pod's agent gets
it (`PUT /v1/experts`, engines that load maps online) or the Deployment rolls through a
pod-template annotation (engines that read the map at start-up). Each evaluation also re-pushes
the version in force to agents that report an older one (new or restarted pods), so the step is
level-based. The version in force is read back from the ConfigMap after an operator restart.
Status (`placement.experts[]`) and a Decision (`ExpertRebalance`) go into the AutoscaleView.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from semipd.api.durations import to_seconds
from semipd.api.timestamps import epoch_of, rfc3339
from semipd.api.v1alpha1 import ExpertPlacementStatus, InferencePoolSpec
from semipd.context import Actuation, NodePoolFacts, PoolFacts
from semipd.controller.agents import ready_pod_ips
from semipd.controller.expertmemory import NodePoolMemory
from semipd.controller.plan import conflict_with
from semipd.controller.view import AutoscaleView
from semipd.desired import experts as desired
from semipd.desired.owner import Owner
from semipd.observe.prometheus import MetricsError
from semipd.policy.experts.formats import ExpertPlacementDoc, FormatError, load_matrix
from semipd.policy.experts.layout import FloatArray
from semipd.policy.experts.rebalance import ExpertTopology, RebalancePlan, plan_rebalance, topology_of
from semipd.policy.experts.trigger import TriggerPolicy
from semipd.policy.state import Decision

log = logging.getLogger(__name__)

ACTION = "ExpertRebalance"
ALGORITHM = "improved"
QUERY_TIMEOUT_S = 15.0
PUSH_TIMEOUT_S = 60.0
CONFIGMAP_API = ("v1", "ConfigMap")


def _float(text: str | None) -> float | None:
    try:
        return None if text is None else float(text)
    except ValueError:
        return None


def _status(
    np_name: str,
    cm: str,
    mem: NodePoolMemory,
    applied: tuple[int, int],
    reason: str,
    message: str,
    actuation: Actuation,
) -> ExpertPlacementStatus:
    doc = mem.doc

    def unit(value: float | None) -> float | None:
        return None if value is None else min(1.0, max(0.0, round(value, 4)))

    return ExpertPlacementStatus(
        node_pool=np_name,
        config_map=cm if doc is not None else "",
        version=0 if doc is None else doc.version,
        applied=f"{applied[0]}/{applied[1]}",
        actuation=actuation.value,
        max_mean_now=round(mem.history[-1][1], 4) if mem.history else None,
        max_mean_before=None if mem.max_mean_before is None else round(mem.max_mean_before, 4),
        max_mean_after=None if mem.max_mean_after is None else round(mem.max_mean_after, 4),
        balancedness_before=unit(None if doc is None else doc.balancedness_before),
        balancedness_after=unit(None if doc is None else doc.balancedness_after),
        last_rebalance=mem.written_at,
        reason=reason[:128],
        message=message[:1024],
    )


async def _load(ctx: Any, owner: Owner, np_name: str, mem: NodePoolMemory) -> str | None:
    """Read the version in force back from the ConfigMap (once per operator process).

    Returns why the ConfigMap must not be written: one of that name exists and is not ours. It is read
    again on every evaluation until the user renames, deletes or annotates it for adoption.
    """
    if mem.loaded:
        return None
    body = await ctx.children.get(*CONFIGMAP_API, owner.namespace, desired.configmap_name(owner.name, np_name))
    conflict = conflict_with(body, owner.uid, owner.name)
    if conflict is not None:
        return conflict
    mem.loaded = True
    if body is None:
        return None
    try:
        stored = desired.read_configmap(body)
    except (FormatError, ValueError, KeyError, TypeError) as err:
        log.warning("ignoring expert ConfigMap of %s/%s %s: %s", owner.namespace, owner.name, np_name, err)
        return None
    mem.doc, mem.written_at = stored.doc, stored.written_at
    mem.last_rebalance = epoch_of(stored.written_at)
    mem.max_mean_before = _float(stored.doc.extra.get("maxMeanBefore"))
    mem.max_mean_after = _float(stored.doc.extra.get("maxMeanAfter"))
    return None


async def _weight(ctx: Any, source: Any, spec: InferencePoolSpec, np: NodePoolFacts, selector: str) -> FloatArray | str:
    """The [layers, experts] load over the rebalance window, or why there is none."""
    metrics = np.driver.metrics
    window = f"{max(1, round(to_seconds(spec.placement.experts.rebalance_window)))}s"
    query = metrics.expert_load(window, selector)
    if query is None:
        return "NoExpertLoadMetric:the engine exports no per-expert load counter (docs/placement.md)"
    try:
        samples = await asyncio.wait_for(source.query(query), QUERY_TIMEOUT_S)
    except (MetricsError, TimeoutError) as err:
        return f"MetricsUnavailable:{err}"
    try:
        weight = load_matrix([(labels, v) for labels, v in samples if v is not None], experts=spec.model.experts)
    except FormatError as err:
        return f"NoExpertLoad:{err}"
    if not weight.sum() > 0:
        return "NoExpertLoad:no tokens were routed in the rebalance window"
    return weight


async def _versions(ctx: Any, ips: Mapping[str, str], port: int, token: str) -> dict[str, int | None]:
    """pod -> the placement version its agent reports (None: unreadable or unsupported)."""
    names = sorted(ips)
    states = await asyncio.gather(*(ctx.agents.experts(ips[n], port, token) for n in names))
    versions: dict[str, int | None] = {}
    for pod, state in zip(names, states, strict=True):
        version = state.get("version") if isinstance(state, dict) and state.get("supported") else None
        versions[pod] = version if isinstance(version, int) and not isinstance(version, bool) else None
    return versions


async def _push(
    ctx: Any, ips: Mapping[str, str], port: int, token: str, doc: ExpertPlacementDoc
) -> tuple[dict[str, int | None], list[str]]:
    """Bring every agent to `doc.version`: (pod -> version in force after this, errors)."""
    versions = await _versions(ctx, ips, port, token)
    # Unreadable agents are retried next evaluation; a newer version in force is not pushed back.
    behind = [pod for pod, version in versions.items() if version is not None and version < doc.version]
    envelope = doc.to_json()
    results = await asyncio.gather(
        *(ctx.agents.set_experts(ips[p], port, token, envelope, timeout=PUSH_TIMEOUT_S) for p in behind)
    )
    errors = []
    for pod, err in zip(behind, results, strict=True):
        if err is None:
            versions[pod] = doc.version
        else:
            errors.append(f"{pod}: {err}")
    return versions, errors


async def place_experts(
    ctx: Any,
    body: Mapping[str, Any],
    spec: InferencePoolSpec,
    facts: PoolFacts,
    source: Any,
    pods_by_np: Mapping[str, Sequence[Mapping[str, Any]]],
    token: str,
    view: AutoscaleView,
    now: float,
) -> list[Decision]:
    """One expert-placement evaluation of one InferencePool; updates `view.experts`, returns decisions."""
    meta = body["metadata"]
    owner = Owner(meta["name"], meta["namespace"], meta["uid"])
    if not spec.placement.experts.enabled:
        view.experts.clear()
        return []
    wanted = {np_.name for np_ in spec.node_pools}
    for gone in set(view.experts) - wanted:
        del view.experts[gone]
    for gone in set(view.expert_memory) - wanted:
        del view.expert_memory[gone]
    policy = TriggerPolicy.from_spec(spec.placement.experts)
    decisions: list[Decision] = []
    for np_ in spec.node_pools:
        mem = view.expert_memory.setdefault(np_.name, NodePoolMemory())
        try:
            decision = await _place_node_pool(
                ctx, owner, spec, facts[np_.name], source, pods_by_np, token, view, mem, policy, now
            )
        except Exception as err:  # one node pool's failure must not stop the others or the autoscaler
            log.exception("expert placement of %s/%s %s failed", owner.namespace, owner.name, np_.name)
            cm = desired.configmap_name(owner.name, np_.name)
            view.experts[np_.name] = _status(
                np_.name, cm, mem, (0, 0), "PlacementFailed", repr(err), facts[np_.name].actuation
            )
            continue
        if decision is not None:
            decisions.append(decision)
    return decisions


async def _place_node_pool(
    ctx: Any,
    owner: Owner,
    spec: InferencePoolSpec,
    np_: NodePoolFacts,
    source: Any,
    pods_by_np: Mapping[str, Sequence[Mapping[str, Any]]],
    token: str,
    view: AutoscaleView,
    mem: NodePoolMemory,
    policy: TriggerPolicy,
    now: float,
) -> Decision | None:
    cm = desired.configmap_name(owner.name, np_.name)
    kind, mode = np_.kind, np_.actuation
    pods = list(pods_by_np.get(np_.name, []))
    ips = ready_pod_ips(pods)
    ready = [p for p in pods if p["metadata"]["name"] in ips]

    def status(reason: str, message: str, applied: tuple[int, int] = (0, len(ready))) -> None:
        view.experts[np_.name] = _status(np_.name, cm, mem, applied, reason, message, mode)

    topology = topology_of(spec, np_.node_pool)
    if isinstance(topology, str):
        status("InvalidTopology", topology)
        return None
    if mode in (Actuation.ENGINE, Actuation.NONE):
        why = (
            f"engine {kind} rebalances experts itself (its own EPLB); the operator sets only the redundancy"
            if mode == Actuation.ENGINE
            else f"engine {kind} can neither load an expert map online nor read one at start-up"
        )
        status(mode.value, why)
        return None
    conflict = await _load(ctx, owner, np_.name, mem)
    if conflict is not None:
        status("Conflict", conflict)
        return None
    port = spec.engine.ports.admin
    applied = (0, len(ready))
    errors: list[str] = []
    if mode == Actuation.AGENT:
        if mem.doc is not None:
            versions, errors = await _push(ctx, ips, port, token, mem.doc)
            applied = (sum(1 for v in versions.values() if v == mem.doc.version), len(ready))
        else:
            versions = await _versions(ctx, ips, port, token)
        mem.highest_seen = max([mem.highest_seen, *(v for v in versions.values() if v is not None)])
    elif mode == Actuation.ROLLING_RESTART and mem.doc is not None:
        applied = (desired.pods_at_version(ready, mem.doc.version), len(ready))
    if not ready:
        status("NoReadyReplicas", "no Ready replica reports expert load", applied)
        return None
    names = "|".join(sorted(ips))
    weight = await _weight(ctx, source, spec, np_, f'namespace="{owner.namespace}",pod=~"{names}"')
    if isinstance(weight, str):
        reason, _, message = weight.partition(":")
        status(reason, message, applied)
        return None
    current = mem.doc.phy2log if mem.doc is not None else None
    if current is None or current.shape != (weight.shape[0], topology.slots):
        current = topology.trivial(weight.shape[0])
    plan = await asyncio.to_thread(
        plan_rebalance, weight, current, topology, list(mem.history), now, mem.last_rebalance, policy
    )
    mem.history.append((now, plan.before.worst_max_over_mean))
    if plan.phy2log is None or plan.after is None:
        message = plan.trigger.message + ("; push failed: " + "; ".join(errors) if errors else "")
        status(plan.trigger.reason, message, applied)
        return None
    return await _rebalance(ctx, owner, spec, np_, mode, topology, plan, mem, ips, ready, token, now, status)


async def _rebalance(
    ctx: Any,
    owner: Owner,
    spec: InferencePoolSpec,
    np_: NodePoolFacts,
    mode: Actuation,
    topology: ExpertTopology,
    plan: RebalancePlan,
    mem: NodePoolMemory,
    ips: Mapping[str, str],
    ready: Sequence[Mapping[str, Any]],
    token: str,
    now: float,
    status: Any,
) -> Decision:
    assert plan.phy2log is not None
    assert plan.after is not None
    before, after = plan.before, plan.after
    version = 1 + max(mem.doc.version if mem.doc is not None else 0, mem.highest_seen)
    doc = ExpertPlacementDoc(
        version=version,
        phy2log=plan.phy2log,
        num_logical=topology.experts,
        num_devices=topology.devices,
        algorithm=ALGORITHM,
        pool=f"{owner.namespace}/{owner.name}/{np_.name}",
        balancedness_before=round(before.sglang, 6),
        balancedness_after=round(after.sglang, 6),
        extra={
            "maxMeanBefore": f"{before.worst_max_over_mean:.6f}",
            "maxMeanAfter": f"{after.worst_max_over_mean:.6f}",
            "trigger": plan.trigger.reason,
        },
    )
    layers, first_moe = None, 0
    profile = np_.model.model
    if profile.moe_layers == plan.phy2log.shape[0]:  # else SGLang's map covers the MoE layers only
        layers, first_moe = profile.layers, profile.layers - profile.moe_layers
    written = rfc3339(now)
    intent = desired.expert_configmap(
        owner, np_.name, doc, written_at=written, num_layers=layers, first_moe_layer=first_moe
    )
    await ctx.children.apply(intent)
    mem.doc, mem.written_at, mem.last_rebalance = doc, written, now
    mem.max_mean_before, mem.max_mean_after = before.worst_max_over_mean, after.worst_max_over_mean
    errors: list[str] = []
    if mode == Actuation.AGENT:
        versions, errors = await _push(ctx, ips, spec.engine.ports.admin, token, doc)
        applied = (sum(1 for v in versions.values() if v == version), len(ready))
        how = f"pushed to {applied[0]} of {applied[1]} Ready pods"
    else:
        await ctx.children.apply(desired.rollout_intent(owner, np_.name, version), manager_suffix="-experts")
        applied = (desired.pods_at_version(ready, version), len(ready))
        how = "rolling the Deployment (maxUnavailable 0, PDB maxUnavailable 1)"
    message = (
        f"version {version}: max/mean {before.worst_max_over_mean:.3f} -> {after.worst_max_over_mean:.3f}, "
        f"balancedness {before.sglang:.3f} -> {after.sglang:.3f}; {how}"
    )
    if errors:
        message += "; failed: " + "; ".join(errors)
    status(plan.trigger.reason, message, applied)
    details = {
        **plan.trigger.details,
        "version": str(version),
        "configMap": desired.configmap_name(owner.name, np_.name),
        "maxMeanBefore": f"{before.worst_max_over_mean:.3f}",
        "maxMeanAfter": f"{after.worst_max_over_mean:.3f}",
        "balancednessBefore": f"{before.sglang:.3f}",
        "balancednessAfter": f"{after.sglang:.3f}",
        "actuation": mode.value,
    }
    return Decision(now, ACTION, plan.trigger.reason, node_pool=np_.name, message=message, details=details)
