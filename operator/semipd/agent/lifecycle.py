"""The supervisor's start-up, reporting and shutdown: the MPS daemon it may need, its status document,
the pids file, and the drain on stop (lame duck, then what the engine holds finishes, then children
stop). Standard library only."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time
from typing import TYPE_CHECKING, Any

from semipd.agent import drivers, httpwire
from semipd.agent.control import ControlError
from semipd.agent.mps import MpsDaemon, plan_mps
from semipd.agent.procs import exit_status
from semipd.agent.runpaths import pids_file
from semipd.agent.supervision import DRAINING, STOPPED, SupervisionError, Worker

if TYPE_CHECKING:
    from semipd.agent.supervisor import Supervisor

log = logging.getLogger("semipd.agent")

FORWARDED_SIGNALS = (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


async def start_mps(sup: Supervisor) -> None:
    """Start an MPS control daemon for the children when the settings and the driver call for one."""
    if sup.s.mps == "off" or (sup.s.mps == "auto" and not sup.driver.needs_mps):
        return
    plan = plan_mps(sup._child_env, sup.s.run_dir, MpsDaemon.locate())
    if isinstance(plan, str):
        if sup.s.mps == "on":
            raise SupervisionError(plan)
        log.warning("%s (driver %s would use it)", plan, sup.driver.kind)
        return
    sup.mps = MpsDaemon(plan)
    await sup.mps.start()
    sup._child_env.update(sup.mps.client_env())
    sup.metrics.mps_daemon.set(1)


def write_pids(sup: Supervisor) -> None:
    doc = {
        "agent": os.getpid(),
        "engine": sup.owner.pid if sup.owner and sup.owner.returncode is None else None,
        "workers": {str(w.id): w.child.pid for w in sup.workers.values() if w.child.returncode is None},
    }
    path = pids_file(sup.s.run_dir)
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, path)
    except OSError as e:
        log.warning("cannot write %s: %s", path, e)


def status(sup: Supervisor) -> dict[str, Any]:
    return {
        "engine": sup.driver.kind,
        "switchMode": sup.driver.switch_mode,
        "supported": sup.driver.supports_split,
        "unsupportedReason": sup.driver.unsupported_reason or None,
        "state": sup.state,
        **sup.split.to_json(),
        "pending": None if sup.pending is None else sup.pending.to_json(),
        "activeWorker": None if sup.active is None else _worker_json(sup.active),
        "workers": [_worker_json(w) for w in sorted(sup.workers.values(), key=lambda w: w.id)],
        "switchesTotal": int(sup.metrics.switches.value()),
        "failedSwitchesTotal": int(sup.metrics.failed_switches.value()),
        "workerRestartsTotal": int(sup.metrics.worker_restarts.value()),
        "lastSwitch": None if sup.last_switch is None else sup.last_switch.to_json(),
        "lastError": sup.last_error,
        "bounds": {
            "prefillMin": sup.s.bounds.prefill_min,
            "prefillMax": sup.s.bounds.prefill_max,
            "decodeMin": sup.s.bounds.decode_min,
            "decodeMax": sup.s.bounds.decode_max,
        },
    }


async def drain_engine(sup: Supervisor) -> None:
    deadline = time.monotonic() + sup.s.drain_timeout
    owner = sup.owner
    if owner is None or owner.returncode is not None:
        return
    if sup.driver.switch_mode == drivers.STANDBY_SWAP:
        try:
            remaining = await sup.control.drain()
            while remaining and time.monotonic() < deadline:
                await asyncio.sleep(sup.s.poll_interval * 5)
                remaining = (await sup.control.state()).inflight_requests
            log.info("drain finished with %d request(s) in flight", remaining)
        except ControlError as e:
            log.warning("drain through the control API failed: %s", e)
    else:
        owner.signal_group(signal.SIGTERM)
        with contextlib.suppress(*httpwire.TIMEOUT_ERRORS):
            await asyncio.wait_for(owner.wait(), max(0.0, deadline - time.monotonic()))


async def shutdown(sup: Supervisor) -> int:
    drain = sup._stop_requested and sup._exit_override is None
    sup.state = DRAINING
    background = [t for t in sup._tasks if not t.done()]
    for task in background:
        task.cancel()
    if background:
        await asyncio.gather(*background, return_exceptions=True)
    if drain and sup.s.drain_delay > 0:
        # Lame duck: readiness already says draining, but keep admitting while routers and
        # endpoint lists catch up (what a preStop sleep does for servers that stop at once).
        log.info("still serving for %.1fs so routers stop sending first", sup.s.drain_delay)
        await asyncio.sleep(sup.s.drain_delay)
    if drain:
        await drain_engine(sup)
    await asyncio.gather(*(w.child.stop(sup.s.stop_timeout) for w in list(sup.workers.values())))
    sup.workers.clear()
    sup.active = None
    rc = 1
    if sup.owner is not None:
        rc = await sup.owner.stop(sup.s.stop_timeout)
    if sup.mps is not None:
        try:
            await sup.mps.stop()
        except OSError as e:
            log.warning("stopping MPS daemon failed: %s", e)
    sup.state = STOPPED
    sup.metrics.engine_up.set(0)
    write_pids(sup)
    status = sup._exit_override if sup._exit_override is not None else exit_status(rc)
    log.info("agent exiting with status %d", status)
    return status


def _worker_json(w: Worker) -> dict[str, Any]:
    return {"id": w.id, "percent": w.percent, "pid": w.child.pid, "alive": w.child.returncode is None}


def forward_signal(sup: Supervisor, sig: int) -> None:
    if sup.owner is not None and sup.owner.returncode is None:
        log.info("forwarding signal %d to engine pid %d", sig, sup.owner.pid)
        sup.owner.signal_group(sig)


def install_signal_handlers(sup: Supervisor) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, sup.request_stop)
    for sig in FORWARDED_SIGNALS:
        loop.add_signal_handler(sig, forward_signal, sup, sig)
