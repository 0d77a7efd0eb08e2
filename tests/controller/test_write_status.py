"""Writing a pool's status: a pool deleted while its evaluation ran is forgotten, not an error
(a 404 on the status patch logged a traceback in CI, stop 36)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

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
        pools=Pools(exists), events=Events(), pool_bodies={key: {}}, autoscale={key: object()}, listing_since={key: 1.0}
    )


def result() -> Any:
    transition = SimpleNamespace(
        type="Ready", new=SimpleNamespace(status=SimpleNamespace(value="True"), reason="Up", message="m")
    )
    return SimpleNamespace(status_patch=lambda: {"observedGeneration": 2}, transitions=[transition])


BODY = {"metadata": {"namespace": "ns", "name": "demo"}, "status": {}}


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
