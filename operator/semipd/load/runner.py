"""Open-loop replay of a request schedule against OpenAI-compatible endpoints.

Requests are sent at their scheduled arrival times, round-robin over the endpoints, with at most
`concurrency` in flight (later arrivals wait, and the wait is recorded). The run is bounded in request
count and in time: dispatch stops at `duration_s`, in-flight requests get `drain_timeout_s`, and
whatever is still running is cancelled and recorded as such.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx

from semipd.load.client import stream_completion
from semipd.load.prompts import PROMPT_TOKENS_FIELD, PromptText, completion_body
from semipd.load.stats import SLO, RequestResult, Summary, summarize
from semipd.traces import TraceRequest

_POOL_SIZE = 8
"""Connections per httpx client (see run_load)."""


class RemoteEndpointError(ValueError):
    """An endpoint is neither loopback nor private and remote load was not allowed."""


# Where pod IPs live: RFC 1918, the RFC 6598 shared range some CNIs use, and IPv6 unique-local.
# Loading these needs no opt-in, so `semipd load` reaches pod IPs as the README's tour does; public
# addresses, link-local (cloud metadata) and unresolved hostnames other than localhost need one.
PRIVATE_NETWORKS = tuple(
    ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")
)


def is_local_or_private(host: str) -> bool:
    """Loopback (127.0.0.0/8, ::1, localhost) or a private network address (where pod IPs live)."""
    if host == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False  # a hostname: not resolved, so not provably local
    return ip.is_loopback or any(ip.version == n.version and ip in n for n in PRIVATE_NETWORKS)


def check_endpoint(url: str, allow_remote: bool) -> str:
    """Validate an endpoint base URL and return it without a trailing slash."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"endpoint must be an http(s) URL with a host, got {url!r}")
    if not allow_remote and not is_local_or_private(parts.hostname):
        raise RemoteEndpointError(
            f"{url!r} is neither loopback (127.0.0.0/8, ::1, localhost) nor a private address (10/8, 172.16/12, "
            "192.168/16, 100.64/10, fc00::/7); pass --allow-remote to load it"
        )
    return url.rstrip("/")


Router = Literal["round-robin", "least-outstanding"]


@dataclass(frozen=True)
class LoadConfig:
    endpoints: tuple[str, ...]
    model: str = "default"
    concurrency: int = 64
    max_requests: int | None = None
    duration_s: float | None = None
    """Stop dispatching after this many seconds (default: when the schedule ends)."""
    request_timeout_s: float = 300.0
    drain_timeout_s: float = 60.0
    api_path: str = "/v1/completions"
    prompt_text: PromptText = "full"
    extensions: bool = True
    """Send the prompt token count as an extension field (named prompt_tokens_field)."""
    prompt_tokens_field: str = PROMPT_TOKENS_FIELD
    ignore_eos: bool = True
    """Ask for exactly max_tokens tokens; a shorter answer counts as truncated."""
    allow_remote: bool = False
    router: Router = "round-robin"
    """`round-robin`, or `least-outstanding` (fewest requests in flight; what inference routers do)."""

    def __post_init__(self) -> None:
        if not self.endpoints:
            raise ValueError("at least one endpoint is required")
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.max_requests is not None and self.max_requests < 0:
            raise ValueError("max_requests must be >= 0")
        for name in ("request_timeout_s", "drain_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.duration_s is not None and self.duration_s <= 0:
            raise ValueError("duration_s must be positive")
        object.__setattr__(self, "endpoints", tuple(check_endpoint(e, self.allow_remote) for e in self.endpoints))


@dataclass(frozen=True)
class LoadResult:
    config: LoadConfig
    results: tuple[RequestResult, ...]
    started_at_unix: float
    duration_s: float
    """From the start of the run to the last request's end."""
    schedule_size: int
    dispatched: int
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self, slo: SLO | None = None) -> Summary:
        return summarize(self.results, self.duration_s, slo)

    def to_json(self, slo: SLO | None = None) -> dict[str, Any]:
        return {
            "config": asdict(self.config),
            "started_at_unix": self.started_at_unix,
            "duration_s": self.duration_s,
            "schedule_size": self.schedule_size,
            "dispatched": self.dispatched,
            **self.extra,
            "summary": self.summary(slo).to_json(),
            "requests": [r.to_json() for r in self.results],
        }


@dataclass
class Progress:
    """Live counters handed to a progress callback."""

    total: int
    dispatched: int = 0
    done: int = 0
    failed: int = 0
    in_flight: int = 0
    elapsed_s: float = 0.0


ProgressCallback = Callable[[Progress], None]


async def run_load(
    schedule: Sequence[TraceRequest],
    config: LoadConfig,
    *,
    on_progress: ProgressCallback | None = None,
    progress_interval_s: float = 0.5,
) -> LoadResult:
    """Replay `schedule` (arrival offsets from now) against `config.endpoints`; return every result."""
    planned = list(schedule)
    if config.max_requests is not None:
        planned = planned[: config.max_requests]
    horizon = config.duration_s if config.duration_s is not None else (planned[-1].arrival_s if planned else 0.0)
    progress = Progress(total=len(planned))
    results: list[RequestResult] = []
    # httpcore's pool does O(connections^2) work per request event, so the concurrency bound is
    # spread over small pools: a request takes a free slot (work-conserving, at most `concurrency`
    # in flight) and uses that slot's client, which therefore never queues internally.
    slots: asyncio.Queue[int] = asyncio.Queue()
    for slot in range(config.concurrency):
        slots.put_nowait(slot)
    n_clients = -(-config.concurrency // _POOL_SIZE)
    limits = httpx.Limits(max_connections=_POOL_SIZE, max_keepalive_connections=_POOL_SIZE)
    timeout = httpx.Timeout(config.request_timeout_s, connect=min(10.0, config.request_timeout_s))

    tls = ssl.create_default_context()  # one TLS context for all clients: each costs ~0.1 s to build

    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(
                httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False, verify=tls)
            )
            for _ in range(n_clients)
        ]
        # Start the clock only after setup, so the first arrivals are not late.
        started_unix = time.time()
        start = time.perf_counter()

        outstanding = [0] * len(config.endpoints)

        def pick(i: int) -> int:
            n = len(config.endpoints)
            if config.router == "least-outstanding":
                return min(range(n), key=lambda k: (outstanding[k], (k - i) % n))
            return i % n

        async def one(i: int, req: TraceRequest) -> None:
            body = completion_body(
                req,
                i,
                config.model,
                mode=config.prompt_text,
                extensions=config.extensions,
                ignore_eos=config.ignore_eos,
                prompt_tokens_field=config.prompt_tokens_field,
            )
            slot = await slots.get()
            progress.in_flight += 1
            target = pick(i)  # after the slot: choices reflect what is really in flight
            endpoint = config.endpoints[target]
            outstanding[target] += 1
            try:
                res = await stream_completion(
                    clients[slot // _POOL_SIZE],
                    endpoint + config.api_path,
                    body,
                    index=i,
                    endpoint=endpoint,
                    scheduled_at_s=req.arrival_s,
                    run_start=start,
                    input_tokens=req.input_tokens,
                    timeout_s=config.request_timeout_s,
                    require_full_length=config.ignore_eos,
                )
            finally:
                progress.in_flight -= 1
                outstanding[target] -= 1
                slots.put_nowait(slot)
            results.append(res)
            progress.done += 1
            if res.status != "ok":
                progress.failed += 1

        tasks: dict[int, asyncio.Task[None]] = {}
        ticker = asyncio.create_task(_tick(on_progress, progress, start, progress_interval_s))
        try:
            for i, req in enumerate(planned):
                if req.arrival_s >= horizon and config.duration_s is not None:
                    break
                delay = req.arrival_s - (time.perf_counter() - start)
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks[i] = asyncio.create_task(one(i, req))
                progress.dispatched += 1
            pending = [t for t in tasks.values() if not t.done()]
            if pending:
                drain_until = max(horizon, time.perf_counter() - start) + config.drain_timeout_s
                wait = max(0.0, drain_until - (time.perf_counter() - start))
                await asyncio.wait(pending, timeout=wait)
        finally:
            for i, t in tasks.items():
                if not t.done():
                    t.cancel()
                    results.append(_cancelled(i, planned[i], config, start))
            await asyncio.gather(*tasks.values(), return_exceptions=True)
            ticker.cancel()
            await asyncio.gather(ticker, return_exceptions=True)
        for t in tasks.values():
            if not t.cancelled() and (exc := t.exception()) is not None:
                raise exc
    end = time.perf_counter()
    if on_progress is not None:
        progress.elapsed_s = end - start
        on_progress(progress)
    results.sort(key=lambda r: r.index)
    return LoadResult(
        config=config,
        results=tuple(results),
        started_at_unix=started_unix,
        duration_s=end - start,
        schedule_size=len(schedule),
        dispatched=progress.dispatched,
    )


def _cancelled(i: int, req: TraceRequest, config: LoadConfig, start: float) -> RequestResult:
    return RequestResult(
        index=i,
        endpoint=config.endpoints[i % len(config.endpoints)],
        scheduled_at_s=req.arrival_s,
        sent_at_s=time.perf_counter() - start,
        input_tokens=req.input_tokens,
        max_tokens=max(1, req.output_tokens),
        status="cancelled",
        error="still running when the drain timeout ended",
    )


async def _tick(cb: ProgressCallback | None, progress: Progress, start: float, interval: float) -> None:
    if cb is None:
        return
    while True:
        progress.elapsed_s = time.perf_counter() - start
        cb(progress)
        await asyncio.sleep(interval)
