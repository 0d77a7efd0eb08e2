"""Writing a pool's status: a pool deleted while its evaluation ran is forgotten, not an error
(a 404 on the status patch logged a traceback in CI, stop 36)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.aio import client

from semipd.controller.kube import PoolClient
from semipd.controller.reconcile import _write_status


class Pools:
    def __init__(self, exists: bool) -> None:
        self.exists = exists
        self.patched: list[tuple[str, str, dict[str, Any]]] = []

    async def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> bool:
        self.patched.append((namespace, name, status))
        return self.exists


class Events:
    def __init__(self) -> None:
        self.posted: list[str] = []

    async def post(self, body: dict[str, Any], kind: str, reason: str, message: str) -> None:
        self.posted.append(reason)


def context(exists: bool) -> Any:
    key = ("ns", "demo")
    return SimpleNamespace(
        pools=Pools(exists),
        events=Events(),
        pool_bodies={key: {"metadata": {"uid": "u-1"}}},
        autoscale={key: object()},
        listing_since={key: 1.0},
    )


def result() -> Any:
    transition = SimpleNamespace(
        type="Ready", new=SimpleNamespace(status=SimpleNamespace(value="True"), reason="Up", message="m")
    )
    return SimpleNamespace(status_patch=lambda: {"observedGeneration": 2}, transitions=[transition])


BODY = {"metadata": {"namespace": "ns", "name": "demo", "uid": "u-1"}, "status": {}}


async def test_a_pool_deleted_during_its_evaluation_is_forgotten_without_events() -> None:
    ctx = context(exists=False)
    await _write_status(ctx, BODY, result())
    assert len(ctx.pools.patched) == 1
    assert ctx.pool_bodies == {}
    assert ctx.autoscale == {}
    assert ctx.listing_since == {}
    assert ctx.events.posted == []


async def test_a_live_pool_keeps_its_state_and_gets_its_events() -> None:
    ctx = context(exists=True)
    await _write_status(ctx, BODY, result())
    assert ctx.pool_bodies[("ns", "demo")]["status"] == {"observedGeneration": 2}
    assert ("ns", "demo") in ctx.autoscale
    assert ctx.events.posted == ["Up"]


async def test_a_pool_recreated_under_the_name_meanwhile_stays_known() -> None:
    ctx = context(exists=False)
    recreated = {"metadata": {"namespace": "ns", "name": "demo", "uid": "u-2"}}
    ctx.pool_bodies[("ns", "demo")] = recreated  # its ADDED event came while the old one was evaluated
    await _write_status(ctx, BODY, result())
    assert ctx.pool_bodies == {("ns", "demo"): recreated}


async def test_the_status_patch_of_a_deleted_pool_answers_false_and_other_errors_raise() -> None:
    pools = PoolClient(client.ApiClient())

    async def gone(*args: Any, **kwargs: Any) -> None:
        raise client.ApiException(status=404, reason="Not Found")

    async def conflict(*args: Any, **kwargs: Any) -> None:
        raise client.ApiException(status=409, reason="Conflict")

    pools._custom.patch_namespaced_custom_object_status = gone  # type: ignore[method-assign]
    assert await pools.patch_status("ns", "demo", {}) is False
    pools._custom.patch_namespaced_custom_object_status = conflict  # type: ignore[method-assign]
    with pytest.raises(client.ApiException):
        await pools.patch_status("ns", "demo", {})
