"""A simulated semi-PD instance follows the simulated engine's rules step by step.

Expected timelines are computed here from the latency model and the engine's rules (owner.py):
prefill at the active worker's share, contended by a running decode batch; a decode step's time
fixed at its start, contended while a prefill batch is in flight; joiners enter at the next step
boundary; KV reserved for prompt + output at admission; FCFS batches under the token budget.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from semipd.perf import contended_shares
from semipd.sim.engine.batching import take_prefill_batch
from semipd.sim.fleet.controller import SetSplit
from semipd.sim.fleet.instance import SwitchMode

from .helpers import H200_8B, fleet, pool, reqs, run

M = H200_8B


def decode_steps(start: float, kv0: int, n: int, share: float = 1.0) -> float:
    """End time of n uncontended single-sequence decode steps starting at `start` with kv0 context."""
    t = start
    for k in range(n):
        t += M.decode_step_time(1, kv0 + k, share)
    return t


def test_single_request_timeline_is_the_latency_models() -> None:
    sim = run(fleet(pool(prefill_percent=80, decode_percent=100)), reqs((0.0, 1000, 5)))
    r = sim.requests[0]
    ttft = M.prefill_time([1000], 0.8)
    assert r.first_token == pytest.approx(ttft, rel=1e-12)
    # Four decode steps; the context grows by one token per step (prompt + 1 generated at the start).
    assert r.finish == pytest.approx(decode_steps(ttft, 1001, 4), rel=1e-12)
    assert r.prefill_exec == pytest.approx(ttft)


def test_prefill_under_a_running_decode_is_contended_and_slows_the_decode() -> None:
    x, y = 0.8, 1.0
    t_pa = M.prefill_time([1000], x)
    d1 = M.decode_step_time(1, 1001, y)
    t_b = t_pa + 0.5 * d1  # B arrives while A's first decode step runs
    sim = run(fleet(pool(prefill_percent=80, decode_percent=100)), reqs((0.0, 1000, 40), (t_b, 2000, 3)))
    a, b = sim.requests
    px, py = contended_shares(x, y)
    t_pb = M.prefill_time([2000], px)
    b_done = t_b + t_pb
    assert b.first_token == pytest.approx(b_done, rel=1e-12)
    # Replay the engine's decode loop by hand: A alone, contended while B's batch is in flight; B joins
    # at the first step boundary after its prefill and leaves after two decode tokens.
    t, kv, a_left, b_left, batch = t_pa, 1001, 39, 0, 1
    b_joined = False
    while a_left:
        if not b_joined and t >= b_done:
            b_joined, b_left, batch, kv = True, 2, batch + 1, kv + 2001
        contended = t_b <= t < b_done
        step = M.decode_step_time(batch, kv, py if contended else y, prefill_running=contended)
        t += step
        kv += batch
        a_left -= 1
        if b_joined and b_left:
            b_left -= 1
            if b_left == 0:
                assert b.finish == pytest.approx(t, rel=1e-9)
                batch, kv = batch - 1, kv - (2000 + 3)
    assert a.finish == pytest.approx(t, rel=1e-9)


def test_kv_pool_full_makes_the_next_request_wait() -> None:
    sim = run(fleet(pool(kv_capacity=1500)), reqs((0.0, 1000, 100), (0.001, 300, 300)))
    a, b = sim.requests
    # B needs 600 tokens; only 400 are free until A finishes and releases its 1100.
    assert b.dispatch == pytest.approx(a.finish)
    assert b.first_token == pytest.approx(a.finish + M.prefill_time([300], 0.8))


def test_request_larger_than_the_pool_is_rejected_not_queued() -> None:
    sim = run(fleet(pool(kv_capacity=1000)), reqs((0.0, 900, 200), (0.1, 10, 10)))
    assert sim.requests[0].rejected == "kv"
    assert sim.requests[1].done


def test_prefill_batches_form_like_the_engine() -> None:
    items = [(0.0, 3000, 50), (0.001, 3000, 50), (0.002, 3000, 50), (0.003, 3000, 50)]
    sim = run(fleet(pool(prefill_percent=100)), reqs(*items))
    r = sim.requests
    # A alone (the worker was idle); then B, C fit one 8192-token batch (D would exceed it).
    assert take_prefill_batch([3000] * 3, [3050] * 3, 8192, 10**6, 255) == 2
    assert r[1].dispatch == r[2].dispatch == pytest.approx(r[0].first_token)
    assert r[3].dispatch == pytest.approx(r[1].first_token)
    # B and C's batch ran contended by A's decode, at the (100, 80%) default decode share.
    share = contended_shares(1.0, 1.0)[0]
    assert r[1].first_token - r[1].dispatch == pytest.approx(M.prefill_time([3000, 3000], share))


def test_max_running_caps_admission() -> None:
    items = [(0.0, 100, 30), (0.0, 100, 30), (0.0, 100, 30)]
    sim = run(fleet(pool(max_running=2)), reqs(*items))
    a, b, c = sim.requests
    assert c.dispatch == pytest.approx(min(a.finish, b.finish))


class SwitchAt:
    """Issues one split change at its first tick."""

    name = "switch"
    interval_s = 1.0

    def __init__(self, prefill: int, decode: int) -> None:
        self.split = (prefill, decode)
        self.done = False

    def control(self, view: object) -> list[SetSplit]:
        if self.done:
            return []
        self.done = True
        return [SetSplit("gpu-0", *self.split)]

    def notes(self) -> list[object]:
        return []


def test_standby_swap_keeps_the_old_split_serving_until_the_new_worker_is_ready() -> None:
    cost = M.switch_cost()
    # One long-prompt request per 0.5 s, so batches are dispatched before and after the swap.
    items = [(0.5 * k, 4000, 2) for k in range(int((1.0 + 2 * cost + 3) / 0.5))]
    sim = run(fleet(pool(prefill_percent=30, decode_percent=100)), reqs(*items), SwitchAt(90, 60))
    swap = 1.0 + 1e-6 + cost
    for r in sim.requests:
        exec_s = r.prefill_exec
        options = [M.prefill_time([4000], s) for s in (0.3, 0.9, *contended_shares(0.3, 1.0)[:1],
                                                        *contended_shares(0.9, 1.0)[:1],
                                                        *contended_shares(0.9, 0.6)[:1])]  # fmt: skip
        assert any(math.isclose(exec_s, o, rel_tol=1e-9) for o in options)
        old_shares = (0.3, contended_shares(0.3, 1.0)[0])
        old = [math.isclose(exec_s, M.prefill_time([4000], s), rel_tol=1e-9) for s in old_shares]
        if r.dispatch < swap - 1e-9:
            assert any(old), "before the swap the old 30 % worker serves"
        elif r.dispatch > swap + 1e-9:
            assert not any(old), "after the swap only the new worker gets batches"
    done = [a for a in sim.actions if a.action == "SplitDone"]
    assert len(done) == 1
    assert done[0].value == "(90, 60)"
    # Prefill swap after one switch cost, decode share one more switch cost later (at a step boundary).
    assert done[0].time >= swap + cost - 1e-9


class SwitchBusy(SwitchAt):
    """Issues one split change, to the pod holding requests, once one does."""

    def control(self, view: Any) -> list[SetSplit]:
        busy = [i for i in view.pools()["gpu"].ready() if i.held()]
        if self.done or not busy:
            return []
        self.done = True
        return [SetSplit(busy[0].name, *self.split)]


def test_restart_mode_drains_before_it_restarts_and_loses_nothing() -> None:
    # Two pods; a request in flight on one when its restart-mode split change arrives, and more
    # arrivals during the drain and the restart: all finish, the new ones on the other pod.
    items = [(0.0, 2000, 400), *[(1.5 + 0.5 * k, 500, 20) for k in range(40)], (M.restart_cost() + 60.0, 100, 2)]
    sim = run(fleet(pool(replicas=2, switch_mode=SwitchMode.RESTART)), reqs(*items), SwitchBusy(90, 60))
    first = sim.requests[0]
    switched = first.instance.name
    assert not first.rejected
    assert first.done
    assert all(r.done and not r.rejected for r in sim.requests)
    (done,) = [a for a in sim.actions if a.action == "SplitDone"]
    assert done.value == "(90, 60)"
    cost = M.restart_cost()
    # The restart began only once the in-flight request had finished (drained), then took its cost.
    assert done.time == pytest.approx(first.finish + cost, rel=1e-6)
    # Nothing arriving during the drain or the restart was admitted by gpu-0.
    late = [r for r in sim.requests[1:] if 1.0 < r.arrival < done.time]
    assert late
    assert all(r.instance.name != switched for r in late)
