"""The KV-cache placement step: observe -> plan -> status, decisions only on change, pod labels only
when they differ, fail-static without metrics, and the placement kept across a restart via status."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from kubernetes.aio.client import ApiException

from semipd.api.v1alpha1 import InferencePoolSpec
from semipd.controller.cache import ObjectCache
from semipd.controller.kvplacement import (
    ACTION,
    decide_kv_placement,
    label_pods,
    placement_in_force,
    publish_kv_placement,
)
from semipd.controller.view import AutoscaleView
from semipd.desired import names
from semipd.desired.routing import CONTEXT_RANGE_LABEL
from semipd.observe.kvcache import observe_kv_pools
from semipd.observe.prometheus import Series
from semipd.policy.kvcache import REASON_MOVED, REASON_SELECTED, REASON_USAGE_UNKNOWN
from semipd.policy.observation import Observation, PodObservation

LOG = logging.getLogger("test")
NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def spec() -> InferencePoolSpec:
    return InferencePoolSpec.model_validate(
        {
            "model": {"name": "m", "source": "hf://m/m", "maxContextLength": 131072, "profile": "llama-3-8b"},
            "engine": {"kind": "sim"},
            "nodePools": [
                {"name": "h200", "accelerator": "nvidia", "kvCacheTokens": 400_000},
                {"name": "ascend", "accelerator": "ascend", "kvCacheTokens": 200_000},
            ],
            "slo": {"ttftP99": "1s", "itlP99": "60ms"},
            "placement": {"kvCache": {"longContextThreshold": 8192, "hysteresis": 0.1}},
        }
    )


def pod(name: str, node_pool: str, *, ready: bool = True, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ml",
        "labels": {names.POOL_LABEL: "chat", names.NODE_POOL_LABEL: node_pool},
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    cond = {"type": "Ready", "status": "True" if ready else "False"}
    return {"metadata": meta, "status": {"phase": "Running", "conditions": [cond]}}


class FakeChildren:
    """Server-side apply of pod labels onto the cached pod, as the API server would merge them."""

    def __init__(self, cache: ObjectCache, fail: set[str] | None = None) -> None:
        self.cache, self.fail = cache, fail or set()
        self.applied: list[dict[str, Any]] = []

    async def apply(self, body: dict[str, Any]) -> dict[str, Any]:
        meta = body["metadata"]
        if meta["name"] in self.fail:
            raise ApiException(status=404, reason="Not Found")
        self.applied.append(body)
        live = self.cache.get("v1/Pod", meta["namespace"], meta["name"])
        assert live is not None
        return {**live, "metadata": {**live["metadata"], "labels": {**live["metadata"]["labels"], **meta["labels"]}}}


@dataclass
class FakeEvents:
    posted: list[tuple[str, str]] = field(default_factory=list)

    async def post(self, body: dict[str, Any], type: str, reason: str, message: str) -> None:
        self.posted.append((reason, message))


class NoHistogram:
    async def query(self, promql: str) -> list[tuple[Series, float | None]]:
        return []


@dataclass
class Ctx:
    cache: ObjectCache = field(default_factory=ObjectCache)
    events: FakeEvents = field(default_factory=FakeEvents)
    children: Any = None


def fleet() -> tuple[Ctx, dict[str, list[dict[str, Any]]]]:
    ctx = Ctx()
    ctx.children = FakeChildren(ctx.cache)
    by_np = {"h200": [pod("h200-a", "h200"), pod("h200-b", "h200", ready=False)], "ascend": [pod("ascend-a", "ascend")]}
    for pods in by_np.values():
        for p in pods:
            ctx.cache.put("v1/Pod", p)
    return ctx, by_np


def usage(h200: float | None, ascend: float | None, available: bool = True) -> Observation:
    return Observation(
        time=NOW,
        available=available,
        age=1.0,
        pods=(PodObservation("h200-a", "h200", kv_usage=h200), PodObservation("ascend-a", "ascend", kv_usage=ascend)),
    )


BODY: dict[str, Any] = {"metadata": {"name": "chat", "namespace": "ml", "uid": "u"}, "status": {}}


def labels(ctx: Ctx) -> dict[str, str | None]:
    pods = ctx.cache.labelled("v1/Pod", "ml", {names.POOL_LABEL: "chat"})
    return {p["metadata"]["name"]: p["metadata"]["labels"].get(CONTEXT_RANGE_LABEL) for p in pods}


async def step(ctx: Ctx, view: AutoscaleView, by_np: Any, obs: Observation, body: Any = BODY) -> None:
    """What one autoscaler evaluation does for KV placement: observe, decide, publish."""
    s = spec()
    observed = await observe_kv_pools(NoHistogram(), s, "ml", by_np, obs)  # type: ignore[arg-type]
    new, decision = decide_kv_placement(s, observed, view, body.get("status"), NOW)
    await publish_kv_placement(ctx, body, view, new, decision, LOG)


async def test_selects_moves_and_keeps_with_decisions_only_on_change() -> None:
    ctx, by_np = fleet()
    view = AutoscaleView()
    children: FakeChildren = ctx.children

    await step(ctx, view, by_np, usage(0.1, 0.1))
    assert view.kv_cache is not None
    assert view.kv_cache.long_context_pools == ["h200"]
    assert [(d.action, d.reason) for d in view.decisions] == [(ACTION, REASON_SELECTED)]
    assert view.decisions[0].details["longContextPools"] == "h200"
    assert labels(ctx) == {"h200-a": "0-131072", "h200-b": None, "ascend-a": "0-8192"}  # not-Ready pod untouched
    assert len(children.applied) == 2

    await step(ctx, view, by_np, usage(0.12, 0.1))
    assert len(view.decisions) == 1, "same long-context pools: no new decision"
    assert len(children.applied) == 2, "labels already right: no API call"

    # H200 headroom 40k vs Ascend 180k tokens: beyond the hysteresis band (0.1 x 400k).
    await step(ctx, view, by_np, usage(0.9, 0.1))
    assert view.kv_cache.long_context_pools == ["ascend"]
    assert [d.reason for d in view.decisions] == [REASON_SELECTED, REASON_MOVED]
    assert view.decisions[-1].details["previous"] == "h200"
    assert {p.name: p.long_weight for p in view.kv_cache.pools} == {"h200": 0, "ascend": 100}
    assert labels(ctx) == {"h200-a": "0-8192", "h200-b": None, "ascend-a": "0-131072"}
    assert len(children.applied) == 4
    assert [r for r, _ in ctx.events.posted] == [ACTION, ACTION]

    # Prometheus down: usage unknown, the placement in force is kept, nothing is written.
    await step(ctx, view, by_np, usage(None, None, available=False))
    assert view.kv_cache.reason == REASON_USAGE_UNKNOWN
    assert view.kv_cache.long_context_pools == ["ascend"]
    assert len(view.decisions) == 2
    assert len(children.applied) == 4


async def test_a_restarted_operator_continues_from_status() -> None:
    ctx, by_np = fleet()
    first = AutoscaleView()
    await step(ctx, first, by_np, usage(0.9, 0.1))
    assert first.kv_cache is not None
    recorded = {"placement": {"kvCache": first.kv_cache.model_dump(by_alias=True, exclude_none=True, mode="json")}}
    body = {**BODY, "status": recorded}
    restored = placement_in_force(None, recorded)
    assert restored == first.kv_cache
    fresh = AutoscaleView()
    await step(ctx, fresh, by_np, usage(0.5, 0.1), body=body)
    assert fresh.kv_cache is not None
    assert fresh.kv_cache.long_context_pools == ["ascend"]
    assert list(fresh.decisions) == [], "the choice recorded in status is not a new decision"
    assert fresh.kv_cache.last_change == first.kv_cache.last_change


def test_placement_in_force_prefers_the_view_and_ignores_bad_status() -> None:
    assert placement_in_force(None, None) is None
    assert placement_in_force(None, {"placement": {"kvCache": {"pools": "nonsense"}}}) is None
    assert placement_in_force(AutoscaleView(), {}) is None


async def test_label_pods_skips_deleting_pods_and_survives_api_errors() -> None:
    ctx, by_np = fleet()
    view = AutoscaleView()
    ctx.children = FakeChildren(ctx.cache, fail={"h200-a"})
    ctx.cache.put("v1/Pod", pod("ascend-old", "ascend", deleting=True))
    await step(ctx, view, by_np, usage(0.1, 0.1))
    assert labels(ctx)["ascend-a"] == "0-8192"
    assert labels(ctx)["h200-a"] is None  # the apply failed; the next evaluation retries
    assert labels(ctx)["ascend-old"] is None
    assert await label_pods(ctx, "ml", "chat", view.kv_cache, LOG) == 0
    ctx.children = FakeChildren(ctx.cache)
    assert await label_pods(ctx, "ml", "chat", view.kv_cache, LOG) == 1
    assert labels(ctx)["h200-a"] == "0-131072"
