"""A restarted operator reconciles before its watches have listed its children: an object it reads
by name that is ours and already carries the intent is cached, not applied again."""

from __future__ import annotations

import asyncio
import copy
from types import SimpleNamespace
from typing import Any

from semipd.controller.cache import ObjectCache
from semipd.controller.reconcile import _converge
from semipd.desired.owner import Owner

OWNER = Owner("shop", "ns", "pool-uid")


def intent() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "shop",
            "namespace": "ns",
            "labels": {"app.kubernetes.io/managed-by": "semipd-operator"},
            "ownerReferences": [OWNER.reference()],
        },
        "spec": {"clusterIP": "None", "ports": [{"name": "http", "port": 8000}]},
    }


class Children:
    def __init__(self, live: dict[str, Any] | None) -> None:
        self.live, self.applied = live, 0

    async def find(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.live)

    async def apply(self, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.applied += 1
        return {**body, "metadata": {**body["metadata"], "resourceVersion": "2"}}


class Events:
    async def post(self, *_: Any) -> None:
        return None


def converge(live: dict[str, Any] | None) -> tuple[Children, ObjectCache]:
    children, cache = Children(live), ObjectCache()
    ctx = SimpleNamespace(cache=cache, applied_digests={}, children=children, events=Events(),
                          config=SimpleNamespace(field_manager="semipd-operator"))  # fmt: skip
    assert asyncio.run(_converge(ctx, {"metadata": {"name": "shop"}}, OWNER, [intent()])) == []  # type: ignore[arg-type]
    return children, cache


def test_an_unchanged_child_missing_from_the_cache_is_cached_not_applied() -> None:
    live = intent()
    live["metadata"]["resourceVersion"] = "1"
    children, cache = converge(live)
    assert children.applied == 0
    assert cache.get("v1/Service", "ns", "shop") is not None


def test_a_drifted_child_missing_from_the_cache_is_applied() -> None:
    live = intent()
    live["spec"]["ports"][0]["port"] = 9000
    children, _ = converge(live)
    assert children.applied == 1
