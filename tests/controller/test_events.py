"""EventRecorder queues Events off the reconcile's path: order kept, a full queue drops, errors don't stop it."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes.aio import client

from semipd.controller import metrics
from semipd.controller.kube import EventRecorder

POOL = {"apiVersion": "semipd.io/v1alpha1", "kind": "InferencePool",
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1"}}  # fmt: skip


class SlowCore:
    """Stands in for CoreV1Api: each create takes `delay`, the first `fail` of them are refused."""

    def __init__(self, delay: float = 0.0, fail: int = 0) -> None:
        self.delay, self.fail, self.sent = delay, fail, []

    async def create_namespaced_event(self, namespace: str, event: Any) -> None:
        await asyncio.sleep(self.delay)
        if self.fail:
            self.fail -= 1
            raise client.ApiException(status=500, reason="boom")
        self.sent.append((namespace, event.reason, event.message))


def recorder(core: SlowCore) -> EventRecorder:
    rec = EventRecorder(client.ApiClient(), "semipd-operator")
    rec._core = core  # type: ignore[assignment]
    return rec


def test_post_returns_before_the_event_is_sent_and_order_is_kept() -> None:
    async def run() -> tuple[list[Any], list[Any]]:
        core = SlowCore(delay=0.05)
        rec = recorder(core)
        for i in range(3):
            await rec.post(POOL, "Normal", "Applied", f"m{i}")
        before = list(core.sent)
        await rec.flush()
        await rec.close()
        return before, core.sent

    before, after = asyncio.run(run())
    assert before == []  # three posts took no send time
    assert after == [("ns", "Applied", "m0"), ("ns", "Applied", "m1"), ("ns", "Applied", "m2")]


def test_a_refused_event_does_not_stop_the_ones_after_it() -> None:
    async def run() -> list[Any]:
        core = SlowCore(fail=1)
        rec = recorder(core)
        await rec.post(POOL, "Warning", "Conflict", "first")
        await rec.post(POOL, "Normal", "Applied", "second")
        await rec.close()
        return core.sent

    assert asyncio.run(run()) == [("ns", "Applied", "second")]


def test_a_full_queue_drops_and_counts() -> None:
    async def run() -> tuple[int, float]:
        core = SlowCore(delay=10)
        rec = recorder(core)
        dropped0 = metrics.EVENTS_DROPPED._value.get()
        for i in range(EventRecorder.QUEUE_SIZE + 5):
            await rec.post(POOL, "Normal", "Applied", f"m{i}")
        dropped = metrics.EVENTS_DROPPED._value.get() - dropped0
        await rec.close(timeout=0.01)
        return len(core.sent), dropped

    sent, dropped = asyncio.run(run())
    assert sent == 0
    # the worker has taken at most one off the queue before the loop filled it
    assert dropped in (4, 5)
