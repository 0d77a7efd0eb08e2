"""The simulated decode-owner process: holds the "weights + KV pool" and runs prefill dispatch and decode.

It admits requests FCFS into prefill batches sent to the active prefill worker (a separate process
attached over the IPC socket), then runs a continuous-batching decode loop whose step time is the
latency model's decode step at the decode share. The public API is in serving.py; the internal
control API (unix socket, control.py) lets the agent list workers, activate one (new batches go to
it; the old one finishes its in-flight batch), change the decode share and drain. A worker that
dies mid-batch has its batch requeued.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from semipd.agent.control import EngineState, WorkerInfo
from semipd.agent.drivers import MPS_PERCENT_ENV
from semipd.agent.runpaths import control_socket, ipc_socket
from semipd.perf import LatencyModel
from semipd.perf.moe import layer_hit_probabilities
from semipd.sim.engine import ipc
from semipd.sim.engine.batching import KvPool, take_prefill_batch
from semipd.sim.engine.config import EngineConfig
from semipd.sim.engine.control import ControlApi
from semipd.sim.engine.expertapi import ExpertLocationApi
from semipd.sim.engine.experts import ExpertPlacement, PlacementError
from semipd.sim.engine.metrics import EngineMetrics
from semipd.sim.engine.openai import Limits
from semipd.sim.engine.requests import FINISHED, SimRequest
from semipd.sim.engine.serving import PublicApi

log = logging.getLogger("semipd.sim.owner")


@dataclass(eq=False)
class AttachedWorker:
    id: int
    percent: int
    pid: int
    writer: asyncio.StreamWriter
    ready: bool = False
    batch: int | None = None

    def info(self) -> WorkerInfo:
        return WorkerInfo(self.id, self.percent, self.ready, 0 if self.batch is None else 1, self.pid)


class DecodeOwner:
    def __init__(self, cfg: EngineConfig, model: LatencyModel) -> None:
        self.cfg = cfg
        self.model = model
        capacity = cfg.kv_capacity_tokens or model.kv_capacity_tokens()
        self.kv = KvPool(capacity)
        self.limits = Limits(
            cfg.served_model_name,
            cfg.context_length or model.model.max_context,
            cfg.default_max_tokens,
        )
        self.token_budget = cfg.chunked_prefill_size or model.max_batch_tokens
        self.clock_scale = cfg.speedup if cfg.metrics_clock == "model" else 1.0
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.joining: list[SimRequest] = []
        self.batches: dict[int, tuple[int, list[SimRequest]]] = {}
        self.workers: dict[int, AttachedWorker] = {}
        self.active: int | None = None
        self.decode_percent = cfg.decode_percent
        self._pending_decode: tuple[int, asyncio.Future[None]] | None = None
        self.admitting = True
        self.open_generations = 0
        self._batch_ids = itertools.count()
        self._dispatch = asyncio.Event()
        self._decode = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        hits = None
        placement, no_placement = None, ""
        m = model.model
        if m.is_moe:
            hits = layer_hit_probabilities(
                m.moe_layers, m.experts, m.experts_per_token, cfg.expert_skew, cfg.expert_seed
            )
            try:
                placement = ExpertPlacement(hits, cfg.ep_size or cfg.tp, cfg.redundant_experts)
            except PlacementError as e:
                no_placement = f"no expert placement: {e}"
                log.warning("%s", no_placement)
        self.metrics = EngineMetrics(cfg.served_model_name, hits, placement)
        experts = self.metrics.experts
        self.expert_api = ExpertLocationApi(
            placement,
            lambda: 0.0 if experts is None else float(experts.routed_tokens),
            m.expert_params * m.bytes_per_param,
            cfg.speedup,
            no_placement,
        )
        self.metrics.max_total_num_tokens.set(capacity)
        self.metrics.speedup.set(cfg.speedup)
        self.metrics.decode_share.set(self.decode_percent / 100.0)
        self._throughput_mark = (time.monotonic(), 0)
        self._generated_total = 0
        self._tasks: list[asyncio.Task[Any]] = []

    # ---- state ---------------------------------------------------------------------------------

    def state(self) -> EngineState:
        return EngineState(
            admitting=self.admitting,
            active_worker=self.active,
            decode_percent=self.decode_percent,
            inflight_requests=self.open_generations,
            workers=tuple(w.info() for w in sorted(self.workers.values(), key=lambda w: w.id)),
        )

    def _publish(self) -> None:
        m = self.metrics
        in_batches = sum(len(b) for _, b in self.batches.values())
        m.num_running_reqs.set(len(self.running) + len(self.joining) + in_batches)
        m.num_queue_reqs.set(len(self.waiting))
        used = sum(r.kv_used for r in self.running) + sum(r.kv_used for r in self.joining)
        m.num_used_tokens.set(used)
        m.token_usage.set(used / self.kv.capacity)
        active = self.workers.get(self.active) if self.active is not None else None
        m.prefill_share.set(active.percent / 100.0 if active else 0.0)
        m.prefill_workers.set(len(self.workers))

    def _busy(self) -> int:
        return len(self.running) + len(self.joining) + sum(len(b) for _, b in self.batches.values())

    # ---- prefill dispatch ------------------------------------------------------------------------

    def _try_dispatch(self) -> bool:
        worker = self.workers.get(self.active) if self.active is not None else None
        if worker is None or not worker.ready or worker.batch is not None or not self.waiting:
            return False
        slots = self.cfg.max_running - self._busy()
        head = list(itertools.islice(self.waiting, max(0, slots)))
        n = take_prefill_batch(
            [r.gen.prompt_tokens for r in head],
            [0 if r.kv_reserved else r.kv_need for r in head],
            self.token_budget,
            self.kv.free(),
            slots,
        )
        if n == 0:
            return False
        batch = [self.waiting.popleft() for _ in range(n)]
        for r in batch:
            r.waiting = False
            if not r.kv_reserved:
                self.kv.reserve(r.kv_need)
                r.kv_reserved = True
        bid = next(self._batch_ids)
        self.batches[bid] = (worker.id, batch)
        worker.batch = bid
        # The worker's share is contended while a decode batch runs beside it (MPS proportional split).
        message = {
            "type": "prefill",
            "batch": bid,
            "prompt_lens": [r.gen.prompt_tokens for r in batch],
            "decode_percent": self.decode_percent if self.running or self.joining else 0,
        }
        worker.writer.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        return True

    async def _dispatch_loop(self) -> None:
        while True:
            await self._dispatch.wait()
            self._dispatch.clear()
            while self._try_dispatch():
                pass
            self._publish()

    def _prefill_done(self, worker: AttachedWorker, bid: int) -> None:
        if worker.batch == bid:
            worker.batch = None
        entry = self.batches.pop(bid, None)
        if entry is None:
            log.warning("worker %d reported unknown batch %d", worker.id, bid)
            return
        batch = entry[1]
        now = time.monotonic()
        tokens = 0
        for r in batch:
            if r.aborted:
                self._release(r)
                continue
            tokens += r.gen.prompt_tokens
            self.metrics.prompt_length.observe(r.gen.prompt_tokens)
            self._emit(r, now)
            if r.generated >= r.gen.max_tokens:
                self._finish(r, now)
            else:
                self.joining.append(r)
        self.metrics.prompt_tokens.inc(tokens)
        if self.metrics.experts is not None:
            self.metrics.experts.routed_tokens += tokens
        self._decode.set()
        self._dispatch.set()

    def _requeue(self, batch: list[SimRequest]) -> None:
        for r in reversed(batch):
            if r.aborted:
                self._release(r)
                continue
            r.waiting = True
            self.waiting.appendleft(r)
            self.metrics.requeued.inc()

    # ---- tokens --------------------------------------------------------------------------------

    def _emit(self, r: SimRequest, now: float) -> None:
        if r.generated == 0:
            self.metrics.ttft.observe((now - r.arrival) * self.clock_scale)
        else:
            self.metrics.itl.observe((now - r.last_token_at) * self.clock_scale)
        r.last_token_at = now
        r.events.put_nowait(r.generated)
        r.generated += 1

    def _release(self, r: SimRequest) -> None:
        if r.kv_reserved:
            self.kv.release(r.kv_need)
            r.kv_reserved = False

    def _finish(self, r: SimRequest, now: float) -> None:
        self._release(r)
        e2e = (now - r.arrival) * self.clock_scale
        self.metrics.e2e.observe(e2e)
        self.metrics.tpot.observe(e2e / r.generated)
        self.metrics.num_requests.inc()
        self.metrics.generation_tokens.inc(r.generated)
        self._generated_total += r.generated
        r.events.put_nowait(FINISHED)

    def _apply_pending_decode(self) -> None:
        if self._pending_decode is not None:
            percent, done = self._pending_decode
            self.decode_percent = percent
            self.metrics.decode_share.set(percent / 100.0)
            self._pending_decode = None
            if not done.done():
                done.set_result(None)

    async def _decode_loop(self) -> None:
        loop = asyncio.get_running_loop()
        next_step = loop.time()
        while True:
            self._apply_pending_decode()
            if not self.running and not self.joining:
                self._decode.clear()
                await self._decode.wait()
                next_step = loop.time()
                continue
            if self.joining:
                self.running.extend(self.joining)
                self.joining.clear()
            batch = len(self.running)
            kv_tokens = sum(r.kv_used for r in self.running)
            prefill: float | None = None
            if self.batches:
                percent = max(self.workers[wid].percent for wid, _ in self.batches.values() if wid in self.workers)
                prefill = percent / 100.0
            step = self.model.decode_batch_time(batch, kv_tokens, self.decode_percent / 100.0, prefill)
            now = loop.time()
            next_step = max(next_step, now) + step / self.cfg.speedup
            await asyncio.sleep(next_step - now)
            stamp = time.monotonic()
            still: list[SimRequest] = []
            for r in self.running:
                if r.aborted:
                    self._release(r)
                    continue
                self._emit(r, stamp)
                if r.generated >= r.gen.max_tokens:
                    self._finish(r, stamp)
                else:
                    still.append(r)
            finished = len(still) != len(self.running)
            self.running = still
            if self.metrics.experts is not None:
                self.metrics.experts.routed_tokens += batch
            self._update_throughput(stamp)
            if finished:
                self._dispatch.set()
            self._publish()

    def _update_throughput(self, now: float) -> None:
        mark_time, mark_tokens = self._throughput_mark
        in_flight = sum(r.generated for r in self.running)
        total = self._generated_total + in_flight
        if now - mark_time >= 1.0:
            rate = (total - mark_tokens) / ((now - mark_time) * self.clock_scale)
            self.metrics.gen_throughput.set(max(0.0, rate))
            self._throughput_mark = (now, total)

    # ---- IPC with prefill workers --------------------------------------------------------------

    async def _serve_worker(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        worker: AttachedWorker | None = None
        try:
            hello = await ipc.receive(reader)
            if hello is None or hello.get("type") != "hello":
                return
            mismatch = [k for k in ("hardware", "model", "tp") if hello.get(k) != getattr(self.cfg, k)]
            wid = int(hello["worker_id"])
            if mismatch or wid in self.workers:
                why = f"mismatched {', '.join(mismatch)}" if mismatch else f"worker id {wid} already attached"
                await ipc.send(writer, {"type": "error", "error": why})
                return
            worker = AttachedWorker(wid, int(hello["percent"]), int(hello["pid"]), writer)
            self.workers[wid] = worker
            log.info("prefill worker %d (%d%%, pid %d) attached", wid, worker.percent, worker.pid)
            await ipc.send(writer, {"type": "attached", "kv_capacity_tokens": self.kv.capacity})
            while True:
                msg = await ipc.receive(reader)
                if msg is None:
                    break
                if msg["type"] == "ready":
                    worker.ready = True
                    log.info("prefill worker %d ready", wid)
                    if self.active is None:
                        self.activate(wid)
                elif msg["type"] == "prefill_done":
                    self._prefill_done(worker, int(msg["batch"]))
        except (ConnectionError, ValueError) as e:
            log.warning("prefill worker channel error: %s", e)
        finally:
            writer.close()
            if worker is not None and self.workers.get(worker.id) is worker:
                self._detach(worker)

    def _detach(self, worker: AttachedWorker) -> None:
        del self.workers[worker.id]
        log.info("prefill worker %d detached", worker.id)
        if self.active == worker.id:
            self.active = None
            fallback = next((w for w in self.workers.values() if w.ready), None)
            if fallback is not None:
                self.activate(fallback.id)
        if worker.batch is not None:
            _, batch = self.batches.pop(worker.batch)
            log.warning("requeueing %d request(s) of worker %d's in-flight batch", len(batch), worker.id)
            self._requeue(batch)
        self._dispatch.set()
        self._publish()

    def activate(self, wid: int) -> int | None:
        previous = self.active
        self.active = wid
        log.info("prefill worker %d active (was %s)", wid, previous)
        self._dispatch.set()
        self._publish()
        return previous

    # ---- APIs ---------------------------------------------------------------------------------

    def public_app(self) -> web.Application:
        return PublicApi(self).app()

    def control_app(self) -> web.Application:
        return ControlApi(self).app()

    # ---- lifecycle -----------------------------------------------------------------------------

    async def drain(self, timeout: float) -> None:
        self.admitting = False
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout)

    async def serve(self) -> int:
        cfg = self.cfg
        load = self.model.restart_cost() if cfg.load_time is None else cfg.load_time
        log.info("loading %s on %s (%.1f model s)", cfg.model, cfg.hardware, load)
        await asyncio.sleep(load / cfg.speedup)
        os.makedirs(cfg.run_dir, exist_ok=True)
        ipc_path, control_path = ipc_socket(cfg.run_dir), control_socket(cfg.run_dir)
        for path in (ipc_path, control_path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        ipc_server = await asyncio.start_unix_server(self._serve_worker, ipc_path, limit=ipc.MAX_LINE)
        control_runner = web.AppRunner(self.control_app(), access_log=None)
        await control_runner.setup()
        await web.UnixSite(control_runner, control_path).start()
        public_runner = web.AppRunner(self.public_app(), access_log=None)
        await public_runner.setup()
        await web.TCPSite(public_runner, cfg.host, cfg.port, shutdown_timeout=cfg.drain_timeout).start()
        log.info("serving %s on http://%s:%d (control %s)", cfg.served_model_name, cfg.host, cfg.port, control_path)
        self._tasks = [
            asyncio.ensure_future(self._dispatch_loop()),
            asyncio.ensure_future(self._decode_loop()),
        ]
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        own_worker = await self._spawn_own_worker() if cfg.enable_semi_pd else None
        waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(stop.wait()), *self._tasks]
        if own_worker is not None:
            waits.append(asyncio.ensure_future(own_worker.wait()))
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        status = 0
        if own_worker is not None and own_worker.returncode is not None and not stop.is_set():
            log.error("prefill worker subprocess exited with status %d; engine exits", own_worker.returncode)
            status = 1
        for task in self._tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                log.error("engine loop failed", exc_info=task.exception())
                status = 1
        if status == 0:
            log.info("draining (%d request(s) in flight)", self.open_generations)
            await self.drain(cfg.drain_timeout)
        await public_runner.cleanup()
        await control_runner.cleanup()
        ipc_server.close()
        for task in self._tasks:
            task.cancel()
        if own_worker is not None and own_worker.returncode is None:
            own_worker.terminate()
            await own_worker.wait()
        for w in list(self.workers.values()):
            w.writer.close()
        return status

    async def _spawn_own_worker(self) -> asyncio.subprocess.Process:
        argv = [sys.executable, "-m", "semipd.sim.engine", *self.cfg.worker_argv(0, self.cfg.prefill_percent)]
        env = dict(os.environ)
        env[MPS_PERCENT_ENV] = str(self.cfg.prefill_percent)
        proc = await asyncio.create_subprocess_exec(*argv, env=env)
        log.info("started own prefill worker pid %d at %d%%", proc.pid, self.cfg.prefill_percent)
        return proc
