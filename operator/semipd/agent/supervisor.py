"""Supervises the engine's processes and carries out split changes (the agent's imperative shell).

standby_swap: start a standby prefill worker with the new share, wait until the decode owner reports
it attached and ready, activate it (the owner switches at a batch boundary), wait for the old worker
to finish its in-flight batch, stop it. Any failure before activation, or the new worker's death before
the old one is told to stop, leaves the old worker active (rollback). A crashed active worker is replaced
with the same share; if the decode owner dies the agent exits with its status. restart: readiness
off, wait until the engine holds no request (drain), relaunch the engine with the new split's env,
rolling back to the old split if the new launch does not become healthy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import Any

from semipd.agent import drivers, engineprobe, lifecycle
from semipd.agent.agentmetrics import AgentMetrics
from semipd.agent.control import ControlClient, ControlError
from semipd.agent.mps import MpsDaemon
from semipd.agent.procs import ChildProcess, exit_status
from semipd.agent.runpaths import control_socket
from semipd.agent.split import Split
from semipd.agent.supervision import (
    DRAINING,
    RESTARTING,
    RUNNING,
    STARTING,
    STOPPED,
    SWITCHING,
    CrashStreak,
    Settings,
    SupervisionError,
    SwitchFailed,
    SwitchRecord,
    SwitchRejected,
    Worker,
)

log = logging.getLogger("semipd.agent")


class Supervisor:
    def __init__(self, settings: Settings, base_env: Mapping[str, str]) -> None:
        self.s = settings
        self.driver = settings.driver
        self.metrics = AgentMetrics(self.driver.kind, self.driver.switch_mode)
        self.state = STARTING
        self.split = settings.initial
        self.pending: Split | None = None
        self.owner: ChildProcess | None = None
        self.workers: dict[int, Worker] = {}
        self.active: Worker | None = None
        self.last_switch: SwitchRecord | None = None
        self.last_error: dict[str, Any] | None = None
        self.control = ControlClient(control_socket(settings.run_dir))
        self.mps: MpsDaemon | None = None
        self._child_env = dict(base_env)
        self._next_worker_id = 0
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._stop_requested = False
        self._owner_exit: int | None = None
        self._exit_override: int | None = None
        self._tasks: set[asyncio.Future[Any]] = set()
        self._crashes = CrashStreak()
        self._publish_split()

    # ---- bookkeeping -------------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Future[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Future[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            if not isinstance(exc, SupervisionError):
                log.error("background task failed", exc_info=exc)

    def _publish_split(self) -> None:
        self.metrics.prefill_share.set(self.split.prefill_percent / 100.0)
        self.metrics.decode_share.set(self.split.decode_percent / 100.0)

    def _record_error(self, message: str, requested: Split | None) -> None:
        self.last_error = {
            "message": message,
            "at": time.time(),
            "requested": None if requested is None else requested.to_json(),
        }

    def _write_pids(self) -> None:
        lifecycle.write_pids(self)

    def status(self) -> dict[str, Any]:
        return lifecycle.status(self)

    @property
    def ready(self) -> bool:
        return self.state in (RUNNING, SWITCHING)

    # ---- processes ---------------------------------------------------------------------------

    async def _launch_owner(self, split: Split) -> ChildProcess:
        launch = self.driver.engine_launch(self.s.engine_argv, split, self.s.run_dir, self._child_env)
        for path, content in launch.files:  # e.g. SGLang PD-Multiplexing's SM-group config
            Path(path).write_text(content)
        child = await ChildProcess.start("engine", launch.argv, launch.env)
        self.owner = child
        self._write_pids()
        self._spawn(self._watch_owner(child))
        return child

    async def _watch_owner(self, child: ChildProcess) -> None:
        rc = await child.wait()
        self._write_pids()
        self.metrics.engine_up.set(0)
        if child.expected_exit or child is not self.owner or self.state == RESTARTING:
            return
        log.error("engine pid %d exited with status %d", child.pid, exit_status(rc))
        self._owner_exit = rc
        self._wake.set()

    def _check_owner(self) -> None:
        if self.owner is None or self.owner.returncode is not None:
            rc = None if self.owner is None else self.owner.returncode
            raise SupervisionError(f"engine exited with status {exit_status(rc or 0) if rc is not None else '?'}")

    async def _watch_worker(self, w: Worker) -> None:
        rc = await w.child.wait()
        self._write_pids()
        if w.child.expected_exit or self._stop_requested:
            return
        log.warning("prefill worker %d (%d%%) exited with status %d", w.id, w.percent, exit_status(rc))
        self._recover_if_crashed(w)

    def _set_active(self, w: Worker) -> None:
        self.active = w
        # The owner can dispatch to a worker before the agent records it as active (it activates a
        # ready worker when it has none); if it died in that gap, its watcher stood down.
        self._recover_if_crashed(w)

    def _recover_if_crashed(self, w: Worker) -> None:
        """Start replacing `w` once, if it is the active worker and died unexpectedly."""
        if self.active is not w or w.recovering or w.child.returncode is None or w.child.expected_exit:
            return
        w.recovering = True
        self._spawn(self._recover_active(w, self._crashes.record(w.id)))

    async def _await_control(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            self._check_owner()
            try:
                await self.control.state()
                return
            except ControlError as e:
                last = e
            await asyncio.sleep(self.s.poll_interval * 5)
        raise SupervisionError(f"decode owner control socket not up within {timeout}s: {last}")

    async def _await_engine_ready(self, timeout: float) -> None:
        await engineprobe.await_healthy(self.s.health, self._check_owner, timeout, self.s.poll_interval * 10)

    async def _start_worker(self, percent: int, timeout: float) -> Worker:
        wid = self._next_worker_id
        self._next_worker_id += 1
        launch = self.driver.prefill_worker_launch(self.s.engine_argv, wid, percent, self.s.run_dir, self._child_env)
        child = await ChildProcess.start(f"prefill-worker-{wid}", launch.argv, launch.env)
        worker = Worker(wid, percent, child)
        self.workers[wid] = worker
        self._write_pids()
        self._spawn(self._watch_worker(worker))
        try:
            await self._await_ready(worker, timeout)
        except BaseException:
            await self._discard(worker)
            raise
        return worker

    async def _await_ready(self, w: Worker, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            rc = w.child.returncode
            if rc is not None:
                raise SwitchFailed(
                    f"prefill worker {w.id} ({w.percent}%) exited with status {exit_status(rc)} before it was ready"
                )
            self._check_owner()
            try:
                info = (await self.control.state()).worker(w.id)
            except ControlError as e:
                raise SwitchFailed(f"control API unavailable while waiting for worker {w.id}: {e}") from e
            if info is not None and info.ready:
                return
            if time.monotonic() > deadline:
                raise SwitchFailed(f"prefill worker {w.id} ({w.percent}%) not attached and ready within {timeout}s")
            await asyncio.sleep(self.s.poll_interval)

    async def _discard(self, w: Worker) -> None:
        await w.child.stop(self.s.stop_timeout)
        self.workers.pop(w.id, None)
        self._write_pids()

    async def _activate(self, w: Worker) -> None:
        """Activate `w` in the decode owner and record it active; a worker the owner refused is stopped."""
        try:
            await self.control.activate(w.id)
        except ControlError as e:
            await self._discard(w)
            raise SwitchFailed(f"activating prefill worker {w.id} failed: {e}") from e
        self._set_active(w)

    async def _drain_worker(self, w: Worker, successor: Worker | None = None) -> None:
        """Wait until the owner reports no in-flight batch on `w` (bounded; a killed batch is requeued),
        or until `successor`, the worker taking over from it, exits."""
        deadline = time.monotonic() + self.s.worker_drain_timeout
        while w.child.returncode is None and time.monotonic() < deadline:
            if successor is not None and successor.child.returncode is not None:
                return
            try:
                info = (await self.control.state()).worker(w.id)
            except ControlError as e:
                log.warning("cannot read worker %d drain state: %s", w.id, e)
                return
            if info is None or info.inflight_batches == 0:
                return
            await asyncio.sleep(self.s.poll_interval)
        if w.child.returncode is None:
            log.warning("worker %d busy after %.1fs: stopping it (batch requeued)", w.id, self.s.worker_drain_timeout)

    async def _recover_active(self, dead: Worker, attempt: int = 0) -> None:
        """Replace a crashed active worker with one of the same share, with backoff.

        The lock is held per attempt only, so a split change can still be made between attempts
        (a share whose workers keep crashing must not lock the operator out).
        """
        while self.active is dead and not self._stop_requested:
            if attempt:
                await asyncio.sleep(min(self.s.restart_backoff_max, 0.25 * 2**attempt))
            async with self._lock:
                if self.active is not dead or self._stop_requested:
                    return
                self.workers.pop(dead.id, None)
                self.metrics.worker_restarts.inc()  # counted per restart, like a kubelet restartCount
                try:
                    worker = await self._start_worker(self.split.prefill_percent, self.s.switch_timeout)
                    await self._activate(worker)
                except SupervisionError as e:
                    attempt += 1
                    log.error("replacing crashed prefill worker %d failed (attempt %d): %s", dead.id, attempt, e)
                    self._record_error(f"replacing crashed prefill worker {dead.id} failed: {e}", None)
                    continue
                log.info("replaced crashed prefill worker %d with worker %d", dead.id, worker.id)

    # ---- split changes -----------------------------------------------------------------------

    def begin_switch(self, target: Split) -> asyncio.Future[SwitchRecord] | None:
        """Validate state and start a switch task; None when `target` is already in force."""
        if not self.driver.supports_split:
            raise SwitchRejected(422, "UnsupportedByEngine", self.driver.unsupported_reason)
        if self.state == STARTING:
            raise SwitchRejected(409, "NotReady", "the engine is still starting")
        if self.state in (DRAINING, STOPPED) or self._stop_requested:
            raise SwitchRejected(409, "ShuttingDown", "the agent is shutting down")
        if self.pending is not None:
            raise SwitchRejected(409, "SwitchInProgress", f"a split change to {self.pending} is already in progress")
        if self._lock.locked():
            raise SwitchRejected(409, "WorkerRestartInProgress", "a crashed prefill worker is being replaced")
        problems = self.s.bounds.check(target)
        if problems:
            raise SwitchRejected(400, "OutOfBounds", "; ".join(problems))
        if target == self.split:
            return None
        self.pending = target
        task: asyncio.Future[SwitchRecord] = asyncio.ensure_future(self._run_switch(target))
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    async def _run_switch(self, target: Split) -> SwitchRecord:
        started = time.monotonic()
        previous = self.split
        try:
            async with self._lock:
                self.state = SWITCHING
                self.metrics.switch_in_progress.set(1)
                log.info("switching split %s -> %s (%s)", previous, target, self.driver.switch_mode)
                try:
                    if self.driver.switch_mode == drivers.STANDBY_SWAP:
                        await self._switch_standby(target)
                    else:
                        await self._switch_restart(target)
                except SupervisionError as e:
                    self.metrics.failed_switches.inc()
                    self._record_error(str(e), target)
                    log.error("split change %s -> %s failed: %s", previous, target, e)
                    raise SwitchFailed(str(e)) from e
                record = SwitchRecord(previous, target, time.monotonic() - started, time.time())
                self.metrics.switches.inc()
                self.metrics.switch_duration.observe(record.duration)
                self.last_switch = record
                log.info("split %s in force after %.3fs", target, record.duration)
                return record
        finally:
            self.pending = None
            self.metrics.switch_in_progress.set(0)
            self._publish_split()
            if self.state in (SWITCHING, RESTARTING):
                self.state = RUNNING

    async def _switch_standby(self, target: Split) -> None:
        old = self.active
        new: Worker | None = None
        if target.prefill_percent != self.split.prefill_percent:
            new = await self._start_worker(target.prefill_percent, self.s.switch_timeout)
            await self._activate(new)
            if old is not None:
                old.child.expected_exit = True  # from here its exit is part of the switch, not a crash
        if target.decode_percent != self.split.decode_percent:
            try:
                await self.control.set_decode_share(target.decode_percent, timeout=self.s.switch_timeout)
            except ControlError as e:
                await self._roll_back_prefill(old, new)
                at = self.split.prefill_percent  # the old share, or the new one when the old worker is gone
                raise SwitchFailed(f"setting decode share {target.decode_percent}% failed: {e}; prefill {at}%") from e
        if new is not None and old is not None:
            await self._drain_worker(old, successor=new)
            if new.child.returncode is not None and old.child.returncode is None:
                # The new worker died once active, before or while the old one drained, and the old one
                # still runs: go back to it, not to a crash restart.
                self.split = Split(self.split.prefill_percent, target.decode_percent)
                await self._roll_back_prefill(old, new)
                raise SwitchFailed(
                    f"prefill worker {new.id} ({new.percent}%) exited once active; prefill stays at {old.percent}%"
                )
            await self._discard(old)
        self.split = target

    async def _roll_back_prefill(self, old: Worker | None, new: Worker | None) -> None:
        if new is None or old is None or old.child.returncode is not None:
            if new is not None:
                # The old worker is gone, so the new one must stay; record the prefill half as done.
                self.split = Split(new.percent, self.split.decode_percent)
            return
        try:
            await self.control.activate(old.id)
        except ControlError as e:
            self.split = Split(new.percent, self.split.decode_percent)
            await self._discard(old)  # the new worker stays; the old one must not run on unwatched
            dead = f" (worker {new.id} exited: a replacement starts)" if new.child.returncode is not None else ""
            raise SwitchFailed(
                f"rollback could not re-activate worker {old.id}: {e}; prefill is at {new.percent}%{dead}"
            ) from e
        old.child.expected_exit = False
        self._set_active(old)
        if new.recovering:
            self._crashes.forgive(new.id)  # its replacement task stands down: the old worker is active
        await self._drain_worker(new)
        await self._discard(new)

    async def _switch_restart(self, target: Split) -> None:
        self.state = RESTARTING
        self.metrics.engine_up.set(0)
        # Readiness is off: routers stop sending (lame duck), then what the engine holds finishes
        # before it is stopped, so a split change loses no request.
        await asyncio.sleep(self.s.restart_drain_seconds)
        left = await engineprobe.await_idle(self.s.health, self.s.restart_drain_timeout, self.s.poll_interval * 10)
        if left:
            log.warning("restart drain timed out with %d request(s) in flight; restarting anyway", left)
        if self.owner is not None:
            await self.owner.stop(self.s.drain_timeout)
        try:
            await self._launch_owner(target)
            await self._await_engine_ready(self.s.restart_timeout)
        except SupervisionError as e:
            if self.owner is not None:
                await self.owner.stop(self.s.stop_timeout)
            try:
                await self._launch_owner(self.split)
                await self._await_engine_ready(self.s.restart_timeout)
            except SupervisionError as e2:
                self._owner_exit = self.owner.returncode if self.owner and self.owner.returncode else 1
                self._wake.set()
                raise SwitchFailed(f"{e}; relaunching with the previous split {self.split} also failed: {e2}") from e2
            self.metrics.engine_up.set(1)
            raise SwitchFailed(f"{e}; relaunched with the previous split {self.split}") from e
        self.metrics.engine_up.set(1)
        self.split = target

    # ---- lifecycle ---------------------------------------------------------------------------

    async def _start(self) -> None:
        await lifecycle.start_mps(self)
        await self._launch_owner(self.split)
        if self.driver.switch_mode == drivers.STANDBY_SWAP:
            await self._await_control(self.s.startup_timeout)
            worker = await self._start_worker(self.split.prefill_percent, self.s.startup_timeout)
            await self._activate(worker)
        else:
            await self._await_engine_ready(self.s.startup_timeout)

    def request_stop(self) -> None:
        if not self._stop_requested:
            log.info("stop requested; draining")
        self._stop_requested = True
        self._wake.set()

    def _finished(self) -> bool:
        return self._stop_requested or self._owner_exit is not None

    async def run(self) -> int:
        start = asyncio.ensure_future(self._start())
        start.add_done_callback(lambda _: self._wake.set())
        while not (start.done() or self._finished()):
            await self._wake.wait()
            self._wake.clear()
        if not start.done():
            # Stopped or the engine died while starting: exit with the engine's own status.
            start.cancel()
            with contextlib.suppress(asyncio.CancelledError, SupervisionError):
                await start
        elif start.exception() is not None:
            exc = start.exception()
            log.error("startup failed: %s", exc)
            self._record_error(f"startup failed: {exc}", None)
            self._exit_override = None if self._owner_exit is not None else 1
        else:
            self.state = RUNNING
            self.metrics.engine_up.set(1)
            log.info("engine ready with split %s", self.split)
            while not self._finished():
                await self._wake.wait()
                self._wake.clear()
        return await self._shutdown()

    async def _shutdown(self) -> int:
        return await lifecycle.shutdown(self)
