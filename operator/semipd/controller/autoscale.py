"""The autoscaler's imperative shell: every `autoscaling.interval`, one pass per InferencePool.

Resolve once (`PoolEvaluation`: spec, per-node-pool facts, pods, token, metrics source), observe
once (`PoolObservation`: SLO series, splits, KV usage), decide once (`decide`: the SLO plan and the
KV-cache placement, pure), then act: split changes go to the agents' admin API (bounded concurrency
per node pool, timeouts, retries), expert maps to ConfigMaps and agents, replica decisions to
reconcile(), which applies them to the Deployments and publishes the decision log, MetricsAvailable
and SLOMet in status.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from semipd.api.durations import format_seconds, to_seconds
from semipd.api.semantics import parse_spec
from semipd.api.timestamps import epoch_of, rfc3339
from semipd.api.v1alpha1 import AutoscalingMode, InferencePoolSpec, KVCachePlacementStatus
from semipd.api.v1alpha1 import Decision as StatusDecision
from semipd.context import PoolFacts, pool_facts
from semipd.controller import metrics
from semipd.controller.agents import ready_pod_ips
from semipd.controller.apiclient import client_closed
from semipd.controller.experts import place_experts
from semipd.controller.kvplacement import decide_kv_placement, publish_kv_placement
from semipd.controller.pooltasks import PoolTasks
from semipd.controller.promsource import choose_source
from semipd.controller.tokens import pool_token
from semipd.controller.view import AutoscaleView
from semipd.desired import names
from semipd.engines.families import slo_buckets
from semipd.observe.fleet import fault_reason, observe_pool, pods_unlisted
from semipd.observe.kvcache import observe_kv_pools
from semipd.observe.prometheus import PrometheusSource
from semipd.policy.kvcache import KVPoolObservation
from semipd.policy.observation import Observation
from semipd.policy.planner import plan
from semipd.policy.state import Decision, Plan, SplitChange, resumed

SWITCHES_PER_POOL = 2
"""At most this many concurrent split switches per node pool (each briefly runs a standby worker)."""
LISTING_HOLD_S = 120.0
"""Longest wait for a pool's pods to be listed before evaluating it anyway (a restart's list of 5,000 pods
took under 30 s in the soak)."""

log = logging.getLogger(__name__)


def status_decision(d: Decision) -> StatusDecision:
    where = f" pod {d.pod}" if d.pod else ""
    return StatusDecision(
        time=rfc3339(d.time),
        action=d.action,
        node_pool=d.node_pool,
        pod=d.pod,
        reason=d.reason,
        message=(d.message + where)[:1024],
        details=dict(list(d.details.items())[:16]),
    )


def published_decision(d: Mapping[str, Any]) -> Decision | None:
    """A decision of the pool's status log as the policy wrote it (None for one it cannot read)."""
    when = epoch_of(d.get("time"))
    if when is None or not d.get("action") or not d.get("reason"):
        return None
    pod = d.get("pod") or None
    message = str(d.get("message") or "")
    message = message.removesuffix(f" pod {pod}") if pod else message
    details = {str(k): str(v) for k, v in (d.get("details") or {}).items()}
    return Decision(when, str(d["action"]), str(d["reason"]), d.get("nodePool"), pod, message, details)


def resumed_view(uid: str, body: Mapping[str, Any]) -> AutoscaleView:
    """The view of a pool this process has not evaluated yet (a restart, a new leader): the decision
    log and the timers it implies come back from status, so no decision is repeated or undone early."""
    published = (body.get("status") or {}).get("decisions") or []
    log = [x for d in published if (x := published_decision(d)) is not None]
    view = AutoscaleView(uid=uid, state=resumed(log))
    view.decisions.extend(status_decision(d) for d in log)
    return view


async def apply_splits(
    agents: Any, changes: tuple[SplitChange, ...], ips: Mapping[str, str], port: int, token: str
) -> list[tuple[SplitChange, str | None]]:
    """PUT each change to its agent, at most SWITCHES_PER_POOL at a time per node pool; (change, error)."""
    limits: dict[str, asyncio.Semaphore] = {}

    async def one(change: SplitChange) -> tuple[SplitChange, str | None]:
        ip = ips.get(change.pod)
        if ip is None:
            return change, "pod is no longer ready"
        async with limits.setdefault(change.node_pool, asyncio.Semaphore(SWITCHES_PER_POOL)):
            err: str | None = await agents.set_split(ip, port, token, change.prefill_percent, change.decode_percent)
        return change, err

    return list(await asyncio.gather(*(one(c) for c in changes)))


@dataclass(frozen=True)
class PoolEvaluation:
    """What one evaluation of one InferencePool resolved before observing: built once, read by every step."""

    body: Mapping[str, Any]
    spec: InferencePoolSpec
    facts: PoolFacts
    namespace: str
    name: str
    token: str
    source: PrometheusSource
    pods_by_np: Mapping[str, list[dict[str, Any]]]
    ips: Mapping[str, str]


@dataclass(frozen=True)
class PoolObservation:
    """Everything one evaluation observed (SLO latencies and splits, KV usage and long-prompt share)."""

    slo: Observation
    kv: Mapping[str, KVPoolObservation]

    @property
    def age(self) -> float:
        return self.slo.age


@dataclass(frozen=True)
class PoolPlan:
    """Everything one evaluation decided, each decision with its reason (pure result of `decide`)."""

    slo: Plan
    kv: KVCachePlacementStatus
    kv_decision: StatusDecision | None


def _still_listing(ctx: Any, key: tuple[str, str], why: str | None) -> bool:
    """Hold a pool's evaluation while its children are still being listed, for at most LISTING_HOLD_S
    (a pod that lost our labels would otherwise hold it for ever); the retry comes 5 s later."""
    if why is None:
        ctx.listing_since.pop(key, None)
        return False
    since = ctx.listing_since.setdefault(key, time.monotonic())
    if time.monotonic() - since < LISTING_HOLD_S:
        log.debug("autoscaling %s/%s waits: %s", *key, why)
        return True
    log.warning("autoscaling %s/%s without waiting any longer for the watch cache: %s", *key, why)
    return False


def _begin(ctx: Any, namespace: str, name: str) -> PoolEvaluation | None:
    body = ctx.pool_bodies.get((namespace, name))
    if body is None:
        return None
    spec, problems = parse_spec(body.get("spec") or {})
    if spec is None or problems:
        return None
    uid = str(body["metadata"]["uid"])
    cfg = ctx.config
    pods = ctx.cache.labelled("v1/Pod", namespace, {names.POOL_LABEL: name})
    by_np = {
        np.name: [p for p in pods if (p["metadata"].get("labels") or {}).get(names.NODE_POOL_LABEL) == np.name]
        for np in spec.node_pools
    }
    deployments = ctx.cache.deployments(namespace, name, by_np)
    if _still_listing(ctx, (namespace, name), pods_unlisted(deployments, by_np)):
        return None
    return PoolEvaluation(
        body=body,
        spec=spec,
        facts=pool_facts(spec),
        namespace=namespace,
        name=name,
        token=pool_token(ctx.token_key, namespace, name, uid),
        source=choose_source(
            ctx.prometheus,
            spec.autoscaling.prometheus_url,
            cfg.prometheus_url,
            cfg.prometheus_allowed_urls,
            new=lambda u: PrometheusSource(u, cfg.prometheus_timeout),
        ),
        pods_by_np=by_np,
        ips=ready_pod_ips(pods),
    )


async def observe(ctx: Any, ev: PoolEvaluation, now: float) -> PoolObservation:
    """One observation of the pool: agents' splits, SLO series, then KV usage from the same samples."""
    splits = await ctx.agents.splits(ev.ips, ev.spec.engine.ports.admin, ev.token)
    slo = await observe_pool(ev.source, ev.spec, ev.namespace, ev.pods_by_np, splits, now)
    kv = await observe_kv_pools(ev.source, ev.spec, ev.namespace, ev.pods_by_np, slo)
    return PoolObservation(slo, kv)


def decide(
    ev: PoolEvaluation, obs: PoolObservation, view: AutoscaleView, current: Mapping[str, int], now: float
) -> PoolPlan:
    """The SLO plan (splits, replicas) and the KV-cache placement, from one observation (pure)."""
    slo = plan(ev.spec, obs.slo, view.state, current, ev.facts.planner_contexts())
    kv, kv_decision = decide_kv_placement(ev.spec, obs.kv, view, ev.body.get("status"), now)
    return PoolPlan(slo, kv, kv_decision)


async def autoscale_once(ctx: Any, namespace: str, name: str, logger: logging.Logger) -> AutoscaleView | None:
    """One evaluation of one InferencePool: resolve once, observe once, decide once, act; returns the view."""
    ev = _begin(ctx, namespace, name)
    if ev is None:
        return None
    uid = str(ev.body["metadata"]["uid"])
    view: AutoscaleView | None = ctx.autoscale.get((namespace, name))
    if view is None or view.uid != uid:
        view = ctx.autoscale[(namespace, name)] = resumed_view(uid, ev.body)
    started = time.perf_counter()
    now = time.time()
    obs = await observe(ctx, ev, now)
    current = {
        p.get("name"): p.get("desiredReplicas", 0) for p in ((ev.body.get("status") or {}).get("nodePools") or [])
    }
    if view.replicas and ev.spec.autoscaling.mode != AutoscalingMode.EXTERNAL:
        current.update(view.replicas)  # in external mode an HPA owns replicas: plan from what runs
    decided = decide(ev, obs, view, current, now)
    metrics.DECISION_SECONDS.observe(time.perf_counter() - started)
    await _act(ctx, ev, obs, decided, view, now, logger)
    view.next_due = time.monotonic() + to_seconds(ev.spec.autoscaling.interval)
    return view


async def _act(
    ctx: Any,
    ev: PoolEvaluation,
    obs: PoolObservation,
    decided: PoolPlan,
    view: AutoscaleView,
    now: float,
    logger: logging.Logger,
) -> None:
    """Carry out one evaluation's plan: switches, expert maps, KV placement, and the view reconcile publishes."""
    spec, namespace, name, result = ev.spec, ev.namespace, ev.name, decided.slo
    targets = {"ttft": to_seconds(spec.slo.ttft_p99), "itl": to_seconds(spec.slo.itl_p99)}
    kinds = [spec.effective_engine(np).kind for np in spec.node_pools]
    metrics.publish_slo(namespace, name, targets, spec.slo.attainment_target, slo_buckets(kinds, targets))
    if obs.slo.available:
        metrics.OBSERVATION_AGE.labels(namespace=namespace, pool=name).set(obs.age)
    failed = []
    for change, err in await apply_splits(ctx.agents, result.splits, ev.ips, spec.engine.ports.admin, ev.token):
        if err:
            failed.append(f"{change.pod}: {err}")
            logger.warning("split change on %s failed: %s", change.pod, err)
    # Expert placement observes per-expert load and agents' map versions itself: it is a level-based
    # push protocol per node pool (docs/architecture.md), fed the same resolved facts.
    experts = await place_experts(ctx, ev.body, spec, ev.facts, ev.source, ev.pods_by_np, ev.token, view, now)
    result = replace(result, decisions=(*result.decisions, *experts))
    window = to_seconds(spec.slo.window)
    for d in result.decisions:
        metrics.DECISIONS.labels(namespace=namespace, pool=name, action=d.action, reason=d.reason).inc()
        if not view.publishes(d, window):
            continue
        view.decisions.append(status_decision(d))
        await ctx.events.post(
            ev.body, "Normal", d.action, f"{d.reason}: {d.message}" + (f" (pod {d.pod})" if d.pod else "")
        )
    view.replicas = dict(result.replicas)
    view.state = result.state
    view.metrics_available = result.metrics_available
    view.metrics_reason = fault_reason(obs.slo) or result.metrics_reason
    view.metrics_message = result.metrics_message + ("; failed switches: " + "; ".join(failed) if failed else "")
    view.slo_met = result.slo_met
    view.slo_message = result.slo_message
    fleet_t = [p.ttft_p99 for p in obs.slo.pools.values() if p.ttft_p99 is not None]
    fleet_i = [p.itl_p99 for p in obs.slo.pools.values() if p.itl_p99 is not None]
    rate = sum(p.request_rate or 0.0 for p in obs.slo.pools.values())
    if obs.slo.available:
        view.observed = {
            "ttftP99": format_seconds(max(fleet_t)) if fleet_t else None,
            "itlP99": format_seconds(max(fleet_i)) if fleet_i else None,
            "requestRate": round(rate, 2),
        }
    await publish_kv_placement(ctx, ev.body, view, decided.kv, decided.kv_decision, logger)


async def _evaluate(ctx: Any, key: tuple[str, str], logger: logging.Logger) -> None:
    view = ctx.autoscale.get(key)
    if view is not None:
        view.next_due = time.monotonic() + 5.0  # retry delay if this run fails or is cut off
    try:
        if await autoscale_once(ctx, key[0], key[1], logger) is not None:
            ctx.poke(*key)
        ctx.liveness.evaluation_done(key)
    except asyncio.CancelledError:
        raise
    except Exception as err:
        if client_closed(err, ctx.stopping):  # shutdown, not a failure
            logger.info("autoscaling %s/%s cut short: the operator is stopping", *key)
            return
        logger.exception("autoscaling %s/%s failed; retrying next interval", *key)


async def autoscale_forever(ctx: Any, logger: logging.Logger) -> None:
    """Evaluate every InferencePool when its interval is due (pools concurrently, bounded, each with a
    timeout); poke reconcile to apply and record."""
    cfg = ctx.config
    tasks = PoolTasks(lambda key: _evaluate(ctx, key, logger), limit=cfg.pool_concurrency, timeout=cfg.pool_timeout,
                      logger=logger, what="autoscaling")  # fmt: skip
    try:
        while True:
            await asyncio.sleep(0.5)
            for key in sorted(ctx.known_pools):
                view = ctx.autoscale.get(key)
                if not tasks.busy(key) and (view is None or time.monotonic() >= view.next_due):
                    tasks.submit(key)
    finally:
        tasks.cancel()
