"""The simulated prefill-worker process: a fixed compute share, attached to the decode owner over IPC.

Its share is fixed for its lifetime (as an MPS client's percentage is). After attaching it spends
the model's switch cost (context creation, IPC import of weights and KV) before reporting ready,
then runs each prefill batch for the model's prefill time at its share.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time

from semipd.agent.runpaths import ipc_socket
from semipd.perf import LatencyModel
from semipd.sim.engine import ipc
from semipd.sim.engine.config import EngineConfig
from semipd.sim.engine.faults import CRASH_STATUS, active_faults

log = logging.getLogger("semipd.sim.worker")


async def _connect(path: str, timeout: float) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await asyncio.open_unix_connection(path, limit=ipc.MAX_LINE)
        except (FileNotFoundError, ConnectionRefusedError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def _work(cfg: EngineConfig, model: LatencyModel, faults: frozenset[str]) -> int:
    reader, writer = await _connect(ipc_socket(cfg.run_dir), cfg.attach_timeout)
    await ipc.send(
        writer,
        {
            "type": "hello",
            "worker_id": cfg.worker_id,
            "percent": cfg.prefill_percent,
            "pid": os.getpid(),
            "hardware": cfg.hardware,
            "model": cfg.model,
            "tp": cfg.tp,
        },
    )
    reply = await ipc.receive(reader)
    if reply is None or reply["type"] != "attached":
        log.error("decode owner refused attach: %s", reply)
        return 1
    if "prefill-hang-on-start" in faults:
        log.warning("fault prefill-hang-on-start: never reporting ready")
        await asyncio.Event().wait()
    await asyncio.sleep(model.switch_cost() / cfg.speedup)
    await ipc.send(writer, {"type": "ready"})
    log.info("prefill worker %d ready at %d%%", cfg.worker_id, cfg.prefill_percent)
    share = cfg.prefill_percent / 100.0
    while True:
        msg = await ipc.receive(reader)
        if msg is None:
            log.info("decode owner closed the channel; exiting")
            return 0
        if msg["type"] != "prefill":
            continue
        if "prefill-crash-on-batch" in faults:
            log.error("fault prefill-crash-on-batch: exiting")
            os._exit(CRASH_STATUS)
        decode = int(msg.get("decode_percent", 0)) / 100.0
        seconds = model.prefill_batch_time(msg["prompt_lens"], share, decode if decode > 0 else None)
        await asyncio.sleep(seconds / cfg.speedup)
        await ipc.send(writer, {"type": "prefill_done", "batch": msg["batch"]})


async def run_worker(cfg: EngineConfig, model: LatencyModel) -> int:
    faults = active_faults(os.environ, cfg.prefill_percent)
    if "prefill-crash-on-start" in faults:
        log.error("fault prefill-crash-on-start: exiting before attach")
        return CRASH_STATUS
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    work = asyncio.ensure_future(_work(cfg, model, faults))
    stopper = asyncio.ensure_future(stop.wait())
    await asyncio.wait({work, stopper}, return_when=asyncio.FIRST_COMPLETED)
    if not work.done():
        work.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await work
        return 0
    stopper.cancel()
    try:
        return work.result()
    except (OSError, ValueError) as e:
        log.error("prefill worker failed: %s", e)
        return 1
