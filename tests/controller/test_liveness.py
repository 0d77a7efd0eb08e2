"""Liveness sees a silent apiserver and a stalled autoscaler, not only the last reconcile."""

from __future__ import annotations

import asyncio
import logging

from semipd.controller.liveness import (
    DEFAULT_INTERVAL_S,
    LOOP_STALL_INTERVALS,
    Liveness,
    heartbeat_forever,
    interval_of,
    known_intervals,
)


def test_healthy_while_the_apiserver_answers_and_pools_are_evaluated() -> None:
    live = Liveness(stale_after=10)
    live.last_api = live.started = 100.0
    live.evaluated[("ns", "p")] = 105.0
    assert live.problems(109.0, {("ns", "p"): 10.0}) == []


def test_a_silent_apiserver_fails_the_probe_after_stale_after() -> None:
    live = Liveness(stale_after=10)
    live.last_api = live.started = 100.0
    assert live.problems(110.0, {}) == []
    (problem,) = live.problems(111.0, {})
    assert "nothing from the apiserver for 11s" in problem


def test_an_overdue_evaluation_fails_the_probe() -> None:
    live = Liveness(stale_after=1000)
    live.last_api = live.started = 0.0
    live.evaluated[("ns", "p")] = 0.0
    bound = LOOP_STALL_INTERVALS * 10.0 + 1.0
    assert live.problems(bound, {("ns", "p"): 10.0}) == []
    (problem,) = live.problems(bound + 0.5, {("ns", "p"): 10.0})
    assert "no autoscaler evaluation of ns/p" in problem
    # A pool never evaluated counts from the operator's start; a deleted pool is forgotten.
    assert live.problems(bound + 0.5, {("ns", "new"): 10.0}) != []
    assert ("ns", "p") not in live.evaluated


def test_interval_of_reads_the_body_with_the_schema_default() -> None:
    assert interval_of({"spec": {"autoscaling": {"interval": "30s"}}}) == 30.0
    assert interval_of({"spec": {}}) == DEFAULT_INTERVAL_S
    assert interval_of({"spec": {"autoscaling": {"interval": "soon"}}}) == DEFAULT_INTERVAL_S
    assert known_intervals([(("a", "b"), {"spec": {"autoscaling": {"interval": "1m"}}})]) == {("a", "b"): 60.0}


def test_the_heartbeat_counts_only_answered_calls() -> None:
    live = Liveness(stale_after=4)  # heartbeat every 1 s
    calls = 0

    async def call() -> object:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("apiserver down")
        if calls == 2:
            await asyncio.sleep(10)  # hangs past the timeout
        return {}

    async def scenario() -> list[float]:
        live.last_api = 0.0
        task = asyncio.create_task(heartbeat_forever(live, call, 0.2, logging.getLogger("t")))
        seen = []
        for _ in range(5):
            await asyncio.sleep(0.6)
            seen.append(live.last_api)
        task.cancel()
        return seen

    seen = asyncio.run(scenario())
    assert seen[0] == 0.0  # the refused call did not count
    assert seen[2] == 0.0  # nor the one cut off by the timeout (t=1.0..1.2)
    assert seen[-1] > 0.0  # the third call answered
    assert calls >= 3
