"""Load against whatever engine pods of an InferencePool are Ready right now (tests and the demo).

A background thread dispatches short open-loop slices with the real load generator
(`semipd.load.run_load`, least-outstanding routing over the pods' IPs), re-reading the Ready pods
before every slice — a stand-in for a router whose endpoint list follows scale-out and scale-in.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from semipd.controller.agents import ready_pod_ips
from semipd.load import LoadConfig, run_load
from semipd.traces import TraceRequest


class Arrivals(Protocol):
    """Requests arriving in [start, end) seconds since the driver started (offsets relative to start)."""

    def between(self, start: float, end: float) -> list[TraceRequest]: ...


class PoissonArrivals:
    """Poisson arrivals at an adjustable `rate`, fixed request shape."""

    def __init__(self, input_tokens: int = 1024, output_tokens: int = 128, seed: int = 7) -> None:
        self.rate = 0.0
        self.input_tokens, self.output_tokens = input_tokens, output_tokens
        self._rng = random.Random(seed)

    def between(self, start: float, end: float) -> list[TraceRequest]:
        out, t = [], 0.0
        while self.rate > 0:
            t += self._rng.expovariate(self.rate)
            if t >= end - start:
                break
            out.append(TraceRequest(t, self.input_tokens, self.output_tokens))
        return out


class TraceArrivals:
    """A precomputed schedule (e.g. a compressed real trace), replayed in slices."""

    def __init__(self, schedule: Sequence[TraceRequest]) -> None:
        self.schedule = sorted(schedule, key=lambda r: r.arrival_s)
        self.end = self.schedule[-1].arrival_s if self.schedule else 0.0

    def between(self, start: float, end: float) -> list[TraceRequest]:
        return [
            TraceRequest(r.arrival_s - start, r.input_tokens, r.output_tokens)
            for r in self.schedule
            if start <= r.arrival_s < end
        ]


class LoadDriver:
    """Dispatches `arrivals` to the Ready pods of one InferencePool until stopped."""

    def __init__(
        self,
        core: Any,
        namespace: str,
        pool: str,
        arrivals: Arrivals,
        *,
        model: str,
        slice_s: float = 2.0,
        port: int = 8000,
    ) -> None:
        self.core, self.namespace, self.pool = core, namespace, pool
        self.arrivals = arrivals
        self.model, self.slice_s, self.port = model, slice_s, port
        self.results: list[Any] = []
        self.elapsed = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def endpoints(self) -> list[str]:
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=f"semipd.io/pool={self.pool}").items
        bodies = [self.core.api_client.sanitize_for_serialization(p) for p in pods if not p.metadata.deletion_timestamp]
        return [f"http://{ip}:{self.port}" for ip in ready_pod_ips(bodies).values()]

    async def _slice(self, endpoints: list[str], schedule: list[TraceRequest]) -> None:
        if not schedule or not endpoints:
            return
        cfg = LoadConfig(
            endpoints=tuple(endpoints),
            model=self.model,
            router="least-outstanding",
            concurrency=256,
            request_timeout_s=120.0,
            drain_timeout_s=120.0,
        )
        res = await run_load(schedule, cfg)
        self.results.extend(res.results)

    async def _run(self) -> None:
        tasks: set[asyncio.Task[None]] = set()
        while not self._stop.is_set():
            endpoints = await asyncio.to_thread(self.endpoints)
            schedule = self.arrivals.between(self.elapsed, self.elapsed + self.slice_s)
            task = asyncio.create_task(self._slice(endpoints, schedule))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            await asyncio.sleep(self.slice_s)
            self.elapsed += self.slice_s
        await asyncio.gather(*tasks)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=300)

    @contextmanager
    def running(self, results_log: Path | None = None) -> Iterator[LoadDriver]:
        """Run the load for the body of a `with`; afterwards keep every result as JSON for post-mortems."""
        self.start()
        try:
            yield self
        finally:
            self.stop()
            if results_log is not None:
                results_log.write_text(json.dumps([r.to_json() for r in self.results])[:5_000_000])

    def failures(self) -> list[str]:
        return [f"{r.endpoint}: {r.status} {r.error}" for r in self.results if r.status != "ok"]
