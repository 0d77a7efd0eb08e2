"""Failure paths with real processes: failed switches roll back; a crashed prefill worker is replaced."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from semipd.agent.control import ControlClient, ControlError, EngineState, WorkerInfo
from semipd.agent.drivers import DRIVERS
from semipd.agent.procs import ChildProcess
from semipd.agent.runpaths import control_socket
from semipd.agent.split import Split, SplitBounds
from semipd.agent.supervision import CrashStreak, SwitchFailed, Worker
from semipd.agent.supervisor import Settings, Supervisor
from semipd.sim.engine.localpod import LocalPod, PodOptions
from semipd.sim.engine.probe import StreamResult, stream_completion

FAULTS = "prefill-crash-on-start:70;prefill-hang-on-start:80"


def metric(text: str, name: str) -> float:
    line = next(ln for ln in text.splitlines() if ln.startswith(name + " "))
    return float(line.split()[1])


async def steady_load(pod: LocalPod, stop: asyncio.Event, results: list[StreamResult]) -> None:
    async with aiohttp.ClientSession() as session:
        while not stop.is_set():
            results.append(await stream_completion(session, pod.engine_url, 500, 16))


async def test_failed_switches_roll_back_and_report_why(pod_factory: Callable[..., LocalPod]) -> None:
    pod = pod_factory(PodOptions(speedup=20.0, env={"SEMIPD_SIM_FAULT": FAULTS}, agent_args=["--switch-timeout", "2"]))
    results: list[StreamResult] = []
    stop = asyncio.Event()
    load = [asyncio.ensure_future(steady_load(pod, stop, results)) for _ in range(3)]
    try:
        # A standby worker that crashes on start.
        status, body = await asyncio.to_thread(pod.put_split, 70)
        assert status == 500
        assert body["reason"] == "SwitchFailed"
        assert "exited with status 3 before it was ready" in body["error"]
        assert (body["prefillPercent"], body["activeWorker"]["id"]) == (50, 0)

        status, split = pod.admin("GET", "/v1/split")
        assert split["prefillPercent"] == 50
        assert split["failedSwitchesTotal"] == 1
        assert split["lastError"]["requested"] == {"prefillPercent": 70, "decodePercent": 100}
        assert "exited with status 3" in split["lastError"]["message"]

        # A standby worker that never becomes ready: times out, is killed, old one stays.
        started = time.monotonic()
        status, body = await asyncio.to_thread(pod.put_split, 80)
        assert status == 500
        assert "not attached and ready within 2.0s" in body["error"]
        assert time.monotonic() - started >= 2.0
        assert [w["id"] for w in body["workers"]] == [0]
        assert list(pod.pids()["workers"]) == ["0"]

        text = pod.metrics_text()
        assert metric(text, "semipd_agent_failed_switches_total") == 2
        assert metric(text, "semipd_agent_switches_total") == 0
        assert metric(text, "semipd_agent_prefill_share_ratio") == 0.5

        # The engine kept the old share throughout, and a healthy switch still works.
        assert "semipd_sim_prefill_share_ratio 0.5" in pod.engine_metrics_text()
        status, body = await asyncio.to_thread(pod.put_split, 60)
        assert status == 200, body
        assert body["prefillPercent"] == 60
        assert body["lastError"]["requested"]["prefillPercent"] == 80  # last error is kept for the record
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*load), timeout=60)
    assert results
    assert [r for r in results if not r.ok] == []


async def test_worker_killed_mid_batch_is_replaced_and_its_requests_complete(
    pod_factory: Callable[..., LocalPod],
) -> None:
    # Long prefills (8k tokens at 10 % share, speedup 2: about a second of wall time each) so the
    # kill lands while a batch is in flight.
    pod = pod_factory(PodOptions(speedup=2.0, prefill_percent=10))
    control = ControlClient(control_socket(str(pod.run_dir)))
    _, split = pod.admin("GET", "/v1/split")
    victim = split["activeWorker"]
    async with aiohttp.ClientSession() as session:
        streams = [asyncio.ensure_future(stream_completion(session, pod.engine_url, 8000, 8)) for _ in range(2)]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            info = (await control.state()).worker(victim["id"])
            if info is not None and info.inflight_batches:
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("no prefill batch became in flight")
        os.kill(victim["pid"], signal.SIGKILL)
        results = await asyncio.wait_for(asyncio.gather(*streams), timeout=90)
    assert [r.error for r in results if not r.ok] == []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        _, split = pod.admin("GET", "/v1/split")
        if split["workerRestartsTotal"] == 1:
            break
        await asyncio.sleep(0.05)
    assert split["workerRestartsTotal"] == 1
    assert split["activeWorker"]["percent"] == 10  # replaced with the same share
    assert split["activeWorker"]["pid"] != victim["pid"]
    assert split["prefillPercent"] == 10
    engine = pod.engine_metrics_text()
    requeued = next(ln for ln in engine.splitlines() if ln.startswith("semipd_sim_requeued_requests_total"))
    assert float(requeued.split()[1]) >= 1
    assert metric(pod.metrics_text(), "semipd_agent_worker_restarts_total") == 1


async def test_crash_looping_share_backs_off_and_a_new_split_rescues_its_requests(
    pod_factory: Callable[..., LocalPod],
) -> None:
    pod = pod_factory(PodOptions(speedup=20.0, env={"SEMIPD_SIM_FAULT": "prefill-crash-on-batch:40"}))
    status, body = await asyncio.to_thread(pod.put_split, 40)
    assert status == 200, body  # the worker starts fine; it dies on its first batch
    async with aiohttp.ClientSession() as session:
        stuck = asyncio.ensure_future(stream_completion(session, pod.engine_url, 300, 5))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            _, split = pod.admin("GET", "/v1/split")
            if split["workerRestartsTotal"] >= 2:
                break
            await asyncio.sleep(0.05)
        assert split["workerRestartsTotal"] >= 2
        assert not stuck.done()  # each replacement at 40 % dies on the requeued batch
        # Between attempts the lock is free: the operator can move to a healthy share.
        for _ in range(100):
            status, body = await asyncio.to_thread(pod.put_split, 60)
            if status != 409:
                break
            await asyncio.sleep(0.05)
        assert status == 200, body
        result = await asyncio.wait_for(stuck, timeout=30)
    assert result.ok, result.error
    _, split = pod.admin("GET", "/v1/split")
    restarts = split["workerRestartsTotal"]
    await asyncio.sleep(1.0)
    _, split = pod.admin("GET", "/v1/split")
    assert split["workerRestartsTotal"] == restarts  # the crash loop has ended
    assert (split["prefillPercent"], split["activeWorker"]["percent"]) == (60, 60)


def bare_supervisor(run_dir: Path) -> Supervisor:
    """A supervisor of the sim driver at (40, 100) with nothing started (its methods driven by hand)."""
    settings = Settings(
        driver=DRIVERS["sim"], engine_argv=(), run_dir=str(run_dir), initial=Split(40, 100), bounds=SplitBounds()
    )
    return Supervisor(settings, {})


async def sleeping_worker(wid: int, seconds: float, percent: int = 40) -> Worker:
    """A prefill worker whose process runs for `seconds`, then exits with status 3."""
    code = f"import time; time.sleep({seconds}); raise SystemExit(3)"
    return Worker(wid, percent, await ChildProcess.start(f"prefill-worker-{wid}", [sys.executable, "-c", code], {}))


async def exited_worker(wid: int, percent: int = 40) -> Worker:
    """A prefill worker whose process has already exited with status 3."""
    worker = await sleeping_worker(wid, 0, percent)
    await worker.child.wait()
    return worker


def stub_owner(
    supervisor: Supervisor, monkeypatch: pytest.MonkeyPatch, started: Worker
) -> tuple[list[int], list[Coroutine[Any, Any, Any]]]:
    """The next worker started is `started`; the owner accepts every activation; spawned tasks (a
    replacement's) are recorded, not run. Returns the activated worker ids and the spawned tasks."""
    activated: list[int] = []
    spawned: list[Coroutine[Any, Any, Any]] = []

    async def start_worker(percent: int, timeout: float) -> Worker:
        supervisor.workers[started.id] = started
        return started

    async def activate(wid: int) -> None:
        activated.append(wid)

    def spawn(coro: Coroutine[Any, Any, Any]) -> None:
        spawned.append(coro)
        coro.close()

    monkeypatch.setattr(supervisor, "_start_worker", start_worker)
    monkeypatch.setattr(supervisor.control, "activate", activate)
    monkeypatch.setattr(supervisor, "_spawn", spawn)
    return activated, spawned


async def test_a_worker_that_dies_before_the_agent_records_it_active_is_still_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The owner activates a ready worker by itself when it has none and dispatches the requeued
    # batch at once, so a replacement can crash before the agent marks it active. Its watcher
    # then sees an inactive worker; making it active must start the replacement (CI flake, stop 36).
    supervisor = bare_supervisor(tmp_path)
    replaced: list[int] = []

    async def record(dead: Worker, attempt: int = 0) -> None:
        replaced.append(dead.id)

    monkeypatch.setattr(supervisor, "_recover_active", record)
    worker = await exited_worker(7)
    await supervisor._watch_worker(worker)  # it died while some other worker was the active one
    assert replaced == []
    supervisor._set_active(worker)
    supervisor._recover_if_crashed(worker)  # a late watcher must not start a second replacement
    await asyncio.sleep(0)
    assert replaced == [7]


async def test_a_replacement_that_dies_before_it_is_recorded_active_gets_its_own_replacement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The flake's path through _recover_active: the replacement starts, the owner dispatches the
    # requeued batch to it and it dies, all before _recover_active records it as the active worker.
    supervisor = bare_supervisor(tmp_path)
    crashed, replacement = await exited_worker(1), await exited_worker(2)
    _, spawned = stub_owner(supervisor, monkeypatch, replacement)  # a second replacement is not run here
    supervisor.active = crashed
    await supervisor._recover_active(crashed)
    assert supervisor.active is replacement
    assert replacement.recovering  # its replacement was started, though its watcher would stand down
    assert len(spawned) == 1


def assert_rolled_back(supervisor: Supervisor, old: Worker, activated: list[int]) -> None:
    """The switch to worker 1 was undone: old worker 0 is re-activated, running, watched, and alone."""
    assert activated == [1, 0]
    assert supervisor.active is old
    assert old.child.returncode is None
    assert not old.child.expected_exit
    assert supervisor.split == Split(40, 100)
    assert list(supervisor.workers) == [0]


async def test_a_standby_worker_that_dies_once_active_rolls_back_to_the_old_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The new worker is activated and the owner dispatches to it at once; if it dies there, the old
    # worker (still running) takes over again instead of being drained and stopped.
    supervisor = bare_supervisor(tmp_path)
    old = await sleeping_worker(0, 60)
    new = await exited_worker(1, percent=60)
    # The dead worker's replacement task is not run: it would find the old worker active and stop.
    activated, _ = stub_owner(supervisor, monkeypatch, new)
    supervisor.active, supervisor.workers = old, {old.id: old}
    try:
        with pytest.raises(SwitchFailed, match="prefill stays at 40%"):
            await supervisor._switch_standby(Split(60, 100))
        assert_rolled_back(supervisor, old, activated)
    finally:
        await old.child.stop(1.0)


async def test_a_standby_switch_whose_old_worker_is_gone_too_keeps_the_new_share_and_replaces_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With nothing to go back to, the switch completes and crash recovery replaces the new worker at
    # the new share (the message must not claim the old share stays).
    supervisor = bare_supervisor(tmp_path)
    old, new = await exited_worker(0), await exited_worker(1, percent=60)
    _, recoveries = stub_owner(supervisor, monkeypatch, new)
    supervisor.active, supervisor.workers = old, {old.id: old}
    await supervisor._switch_standby(Split(60, 100))
    assert supervisor.split == Split(60, 100)
    assert supervisor.active is new
    assert list(supervisor.workers) == [1]
    assert len(recoveries) == 1  # the dead new worker's replacement, started once


@pytest.mark.parametrize(("old_alive", "prefill"), [(True, 40), (False, 60)], ids=["rolled-back", "old-gone"])
async def test_a_failed_decode_share_change_says_which_prefill_share_is_in_force(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, old_alive: bool, prefill: int
) -> None:
    # A prefill swap is undone when the decode share cannot be set, unless the old worker is gone.
    supervisor = bare_supervisor(tmp_path)
    old = await (sleeping_worker(0, 60) if old_alive else exited_worker(0))
    new = await sleeping_worker(1, 60, percent=60)
    stub_owner(supervisor, monkeypatch, new)

    async def refuse(percent: int, timeout: float) -> None:
        raise ControlError("decode owner refused")

    monkeypatch.setattr(supervisor.control, "set_decode_share", refuse)
    supervisor.active, supervisor.workers = old, {old.id: old}
    try:
        with pytest.raises(SwitchFailed, match=f"setting decode share 50% failed: .*; prefill {prefill}%$"):
            await supervisor._switch_standby(Split(60, 50))
        assert supervisor.split == Split(prefill, 100)
        assert supervisor.active is (old if old_alive else new)
    finally:
        await old.child.stop(1.0)
        await new.child.stop(1.0)


@pytest.mark.parametrize("watcher_first", [True, False], ids=["crash-seen-first", "rollback-first"])
async def test_a_standby_worker_that_dies_while_the_old_one_drains_rolls_back_and_is_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, watcher_first: bool
) -> None:
    # The old worker still has a batch in flight when the new one dies: the drain stops waiting, the
    # old worker takes over again, and the death does not lengthen the crash back-off of a later crash,
    # whether the dead worker's watcher saw it before the rollback (a replacement task that stands
    # down) or after it (no replacement at all).
    supervisor = bare_supervisor(tmp_path)
    old, new = await sleeping_worker(0, 60), await sleeping_worker(1, 0.3, percent=60)
    activated, recoveries = stub_owner(supervisor, monkeypatch, new)
    watcher = asyncio.ensure_future(asyncio.sleep(0))
    activate = supervisor.control.activate

    async def activate_in_order(wid: int) -> None:
        nonlocal watcher
        if wid == new.id:  # what _start_worker starts with the worker
            watcher = asyncio.ensure_future(supervisor._watch_worker(new) if watcher_first else new.child.wait())
        elif watcher_first:
            await asyncio.wait({watcher}, timeout=5.0)  # the crash is recorded before the rollback
        await activate(wid)

    async def busy_old_worker() -> EngineState:
        return EngineState(True, new.id, 100, 1, (WorkerInfo(old.id, 40, True, 1, old.child.pid),))

    monkeypatch.setattr(supervisor.control, "activate", activate_in_order)
    monkeypatch.setattr(supervisor.control, "state", busy_old_worker)
    supervisor.active, supervisor.workers = old, {old.id: old}
    try:
        with pytest.raises(SwitchFailed, match="prefill stays at 40%"):
            await asyncio.wait_for(supervisor._switch_standby(Split(60, 100)), 10.0)  # drain timeout: 60 s
        await watcher
        await supervisor._watch_worker(new)  # a late watcher (rollback first) stands down
        assert_rolled_back(supervisor, old, activated)
        # Crash seen first: its replacement task was started and will find the old worker active.
        assert len(recoveries) == int(watcher_first)
        assert supervisor._crashes == CrashStreak()
    finally:
        await old.child.stop(1.0)


def test_crash_streak_counts_quick_crashes_and_forgives_a_rolled_back_one() -> None:
    streak = CrashStreak()
    assert streak.record(1) == 0
    first = streak.last
    assert streak.record(2) == 1  # within the window: one more back-off step
    streak.forgive(2)
    assert streak == CrashStreak(0, first)  # as before the forgiven crash, its time included
    assert streak.record(3) == 1


def test_forgiving_a_crash_with_a_later_one_recorded_only_takes_back_the_count() -> None:
    streak = CrashStreak()
    streak.record(1)
    streak.record(2)  # a real crash after the one forgiven below: its time stays the newest
    later = streak.last
    streak.forgive(1)
    assert streak == CrashStreak(0, later)
