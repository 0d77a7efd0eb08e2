"""The autoscaler's imperative shell: every `autoscaling.interval`, observe -> plan() -> act.

Split changes go to the agents' admin API (bounded concurrency per node pool, timeouts, retries);
replica decisions are handed to reconcile(), which applies them to the Deployments; the decision
log, MetricsAvailable and SLOMet go into status through the same reconcile.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from semipd.api.durations import format_seconds, to_seconds
from semipd.api.semantics import parse_spec
from semipd.api.v1alpha1 import Decision as StatusDecision
from semipd.api.v1alpha1 import InferencePoolSpec
from semipd.controller import metrics
from semipd.controller.agents import ready_pod_ips
from semipd.controller.experts import place_experts
from semipd.controller.kvplacement import kv_placement_step
from semipd.controller.tokens import pool_token
from semipd.controller.view import AutoscaleView
from semipd.desired import names
from semipd.engines import get_driver
from semipd.engines.capabilities import SwitchMode
from semipd.observe.fleet import observe_pool
from semipd.observe.prometheus import PrometheusSource
from semipd.policy.planner import PoolContext, plan
from semipd.policy.profiles import latency_model_for
from semipd.policy.state import Decision, Plan, SplitChange

SWITCHES_PER_POOL = 2
"""At most this many concurrent split switches per node pool (each briefly runs a standby worker)."""

log = logging.getLogger(__name__)


def pool_contexts(spec: InferencePoolSpec) -> dict[str, PoolContext]:
    """Latency models and split facts of each node pool."""
    out = {}
    for np in spec.node_pools:
        driver = get_driver(spec.effective_engine(np).kind)
        model = latency_model_for(spec, np)
        mode = driver.capabilities.switch_mode
        cost = model.restart_cost() if mode == SwitchMode.RESTART else model.switch_cost()
        out[np.name] = PoolContext(model, driver.capabilities.supports_split, cost, mode == SwitchMode.RESTART)
    return out


def _rfc3339(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def status_decision(d: Decision) -> StatusDecision:
    where = f" pod {d.pod}" if d.pod else ""
    return StatusDecision(
        time=_rfc3339(d.time),
        action=d.action,
        node_pool=d.node_pool,
        reason=d.reason,
        message=(d.message + where)[:1024],
        details=dict(list(d.details.items())[:16]),
    )


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


async def autoscale_once(ctx: Any, namespace: str, name: str, logger: logging.Logger) -> AutoscaleView | None:
    """One evaluation of one InferencePool; returns the updated view (None if the pool is gone or invalid)."""
    body = ctx.pool_bodies.get((namespace, name))
    if body is None:
        return None
    spec, problems = parse_spec(body.get("spec") or {})
    if spec is None or problems:
        return None
    uid = str(body.get("metadata", {}).get("uid", ""))
    view: AutoscaleView | None = ctx.autoscale.get((namespace, name))
    if view is None or view.uid != uid:
        view = ctx.autoscale[(namespace, name)] = AutoscaleView(uid=uid)
    started = time.perf_counter()
    url = spec.autoscaling.prometheus_url or ctx.config.prometheus_url
    source = ctx.prometheus.setdefault(url, PrometheusSource(url))
    pods = ctx.cache.labelled("v1/Pod", namespace, {names.POOL_LABEL: name})
    by_np = {
        np.name: [p for p in pods if (p["metadata"].get("labels") or {}).get(names.NODE_POOL_LABEL) == np.name]
        for np in spec.node_pools
    }
    uid = body["metadata"]["uid"]
    token = pool_token(ctx.token_key, namespace, name, uid)
    ips = ready_pod_ips(pods)
    splits = await ctx.agents.splits(ips, spec.engine.ports.admin, token)
    now = time.time()
    obs = await observe_pool(source, spec, namespace, by_np, splits, now)
    current = {p.get("name"): p.get("desiredReplicas", 0) for p in ((body.get("status") or {}).get("nodePools") or [])}
    if view.replicas:
        current.update(view.replicas)
    result: Plan = plan(spec, obs, view.state, current, pool_contexts(spec))
    metrics.DECISION_SECONDS.observe(time.perf_counter() - started)
    metrics.SLO_TARGET.labels(namespace=namespace, pool=name, slo="ttft").set(to_seconds(spec.slo.ttft_p99))
    metrics.SLO_TARGET.labels(namespace=namespace, pool=name, slo="itl").set(to_seconds(spec.slo.itl_p99))
    if obs.available:
        metrics.OBSERVATION_AGE.labels(namespace=namespace, pool=name).set(obs.age)
    failed = []
    for change, err in await apply_splits(ctx.agents, result.splits, ips, spec.engine.ports.admin, token):
        if err:
            failed.append(f"{change.pod}: {err}")
            logger.warning("split change on %s failed: %s", change.pod, err)
    experts = await place_experts(ctx, body, spec, source, by_np, token, view, now)
    result = replace(result, decisions=(*result.decisions, *experts))
    for d in result.decisions:
        metrics.DECISIONS.labels(namespace=namespace, pool=name, action=d.action, reason=d.reason).inc()
        view.decisions.append(status_decision(d))
        await ctx.events.post(
            body, "Normal", d.action, f"{d.reason}: {d.message}" + (f" (pod {d.pod})" if d.pod else "")
        )
    view.replicas = dict(result.replicas)
    view.state = result.state
    view.metrics_available = result.metrics_available
    view.metrics_reason = result.metrics_reason
    view.metrics_message = result.metrics_message + ("; failed switches: " + "; ".join(failed) if failed else "")
    view.slo_met = result.slo_met
    view.slo_message = result.slo_message
    fleet_t = [p.ttft_p99 for p in obs.pools.values() if p.ttft_p99 is not None]
    fleet_i = [p.itl_p99 for p in obs.pools.values() if p.itl_p99 is not None]
    rate = sum(p.request_rate or 0.0 for p in obs.pools.values())
    if obs.available:
        view.observed = {
            "ttftP99": format_seconds(max(fleet_t)) if fleet_t else None,
            "itlP99": format_seconds(max(fleet_i)) if fleet_i else None,
            "requestRate": round(rate, 2),
        }
    await kv_placement_step(ctx, body, spec, view, source, obs, by_np, now, logger)
    view.next_due = time.monotonic() + to_seconds(spec.autoscaling.interval)
    return view


async def autoscale_forever(ctx: Any, logger: logging.Logger) -> None:
    """Evaluate every InferencePool when its interval is due; poke reconcile to apply and record."""
    while True:
        await asyncio.sleep(0.5)
        for key in sorted(ctx.known_pools):
            view = ctx.autoscale.get(key)
            if view is not None and time.monotonic() < view.next_due:
                continue
            try:
                if await autoscale_once(ctx, key[0], key[1], logger) is not None:
                    ctx.poke(*key)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("autoscaling %s/%s failed; retrying next interval", *key)
                view = ctx.autoscale.get(key)
                if view is not None:
                    view.next_due = time.monotonic() + 5.0
