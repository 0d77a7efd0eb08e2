"""Every handler that touches operator state runs on the event loop, never in Kopf's thread pool.

Kopf runs a sync handler in a worker thread; the tracking handlers mutate dicts that the loop
iterates and set an asyncio.Event, so a sync one races with the loop (changed-size errors, a
wake-up lost or flagged by asyncio debug mode).
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import kopf

from semipd.controller.config import OperatorConfig
from semipd.controller.handlers import build_registry
from semipd.controller.liveness import Liveness

# Kopf's own login helper touches no operator state (it only reads the kubeconfig).
STATELESS = {"build_registry.<locals>.login"}


def _handlers(registry: kopf.OperatorRegistry) -> list[Any]:
    regs = (registry._activities, registry._watching, registry._changing, registry._spawning, registry._indexing)
    return [h for reg in regs for h in reg.get_all_handlers()]


def test_every_stateful_handler_is_a_coroutine() -> None:
    handlers = _handlers(build_registry(OperatorConfig()))
    ids = {str(h.id) for h in handlers}
    assert {"build_registry.<locals>.track_node", "build_registry.<locals>.track_child"} <= ids
    sync = [str(h.id) for h in handlers if str(h.id) not in STATELESS and not inspect.iscoroutinefunction(h.fn)]
    assert sync == []


def test_tracking_handlers_feed_the_caches_and_wake_the_loop_on_the_loop() -> None:
    handlers = {str(h.id): h.fn for h in _handlers(build_registry(OperatorConfig()))}

    class Ctx:
        def __init__(self) -> None:
            self.pool_bodies: dict[tuple[str, str], dict[str, Any]] = {}
            self.nodes: dict[str, Any] = {}
            self.wake = asyncio.Event()
            self.liveness = Liveness(stale_after=10)
            self.liveness.last_api = 0.0

    async def scenario() -> tuple[Ctx, bool]:
        loop = asyncio.get_running_loop()
        loop.set_debug(True)  # a cross-thread Event.set() raises in debug mode
        ctx = Ctx()
        memo = kopf.Memo(ctx=ctx)
        pool = {"metadata": {"namespace": "ns", "name": "p"}, "spec": {}}
        await handlers["build_registry.<locals>.track_pool"](
            event={"type": "ADDED"}, body=pool, namespace="ns", name="p", memo=memo
        )
        node = {"metadata": {"name": "n1", "labels": {}}, "spec": {}, "status": {"allocatable": {"cpu": "4"}}}
        await handlers["build_registry.<locals>.track_node"](event={"type": "ADDED"}, body=node, name="n1", memo=memo)
        await handlers["build_registry.<locals>.track_node"](event={"type": "DELETED"}, body=node, name="n1", memo=memo)
        return ctx, loop.get_debug()

    ctx, debug = asyncio.run(scenario())
    assert debug
    assert ctx.pool_bodies == {("ns", "p"): {"metadata": {"namespace": "ns", "name": "p"}, "spec": {}}}
    assert ctx.nodes == {}
    assert ctx.liveness.last_api > 0.0  # every watch event counts as apiserver contact
