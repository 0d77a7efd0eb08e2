"""Liveness that sees the apiserver and the autoscaler, not just the last reconcile.

A steady reconcile makes no API call, so "a reconcile succeeded lately" stays true while the
apiserver is frozen or the watch is dead. The probe therefore fails when nothing came from the
apiserver (a watch event, or the heartbeat's cheap list call) for `staleAfter`, or when a pool's
autoscaler evaluation has not completed for LOOP_STALL_INTERVALS of its interval.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field

from kubernetes.aio import client

from semipd.api.durations import to_seconds
from semipd.api.v1alpha1 import GROUP, PLURAL, VERSION
from semipd.controller import metrics

LOOP_STALL_INTERVALS = 3.0
"""The probe fails when a pool's evaluation is this many of its intervals overdue."""
DEFAULT_INTERVAL_S = 15.0
"""autoscaling.interval's default (semipd.api.scaling), for a body that does not set it."""

Key = tuple[str, str]


@dataclass
class Liveness:
    """When the apiserver last answered, and when each pool's evaluation last completed."""

    stale_after: float
    last_api: float = field(default_factory=time.monotonic)
    started: float = field(default_factory=time.monotonic)
    evaluated: dict[Key, float] = field(default_factory=dict)

    def saw_api(self) -> None:
        """A watch event arrived or an API call succeeded."""
        self.last_api = time.monotonic()

    def evaluation_done(self, key: Key) -> None:
        self.evaluated[key] = time.monotonic()

    def problems(self, now: float, intervals: Mapping[Key, float]) -> list[str]:
        """Why the operator is not alive (empty when it is); `intervals`: known pools' intervals."""
        out = []
        quiet = now - self.last_api
        if quiet > self.stale_after:
            out.append(f"nothing from the apiserver for {quiet:.0f}s (staleAfter {self.stale_after:g}s)")
        for key in list(self.evaluated):
            if key not in intervals:
                del self.evaluated[key]
        for key, interval in sorted(intervals.items()):
            since = self.evaluated.get(key, self.started)
            if now - since > LOOP_STALL_INTERVALS * interval + 1.0:
                out.append(f"no autoscaler evaluation of {key[0]}/{key[1]} for {now - since:.0f}s")
        return out


def interval_of(body: Mapping[str, object]) -> float:
    """A pool body's autoscaling.interval in seconds (the default when unset or unparsable)."""
    spec = body.get("spec")
    scaling = spec.get("autoscaling") if isinstance(spec, Mapping) else None
    raw = scaling.get("interval") if isinstance(scaling, Mapping) else None
    try:
        return to_seconds(str(raw)) if raw else DEFAULT_INTERVAL_S
    except ValueError:
        return DEFAULT_INTERVAL_S


def heartbeat_period(stale_after: float) -> float:
    """Several heartbeats per staleAfter, so one slow call does not fail the probe."""
    return max(1.0, min(30.0, stale_after / 4))


async def heartbeat_forever(
    liveness: Liveness, call: Callable[[], Awaitable[object]], timeout: float, logger: logging.Logger
) -> None:
    """Make a cheap API call every heartbeat period; each success counts as apiserver contact."""
    period = heartbeat_period(liveness.stale_after)
    failing = False
    while True:
        try:
            await asyncio.wait_for(call(), timeout=timeout)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # the apiserver is down or slow: the probe will say so
            if not failing:
                logger.warning("apiserver heartbeat failed: %s", type(err).__name__)
            failing = True
        else:
            liveness.saw_api()
            if failing:
                logger.info("apiserver heartbeat answered again")
            failing = False
        await asyncio.sleep(period)


def known_intervals(bodies: Iterable[tuple[Key, Mapping[str, object]]]) -> dict[Key, float]:
    return {key: interval_of(body) for key, body in bodies}


def list_one_pool(
    api: client.ApiClient, namespaces: tuple[str, ...], timeout: float
) -> Callable[[], Awaitable[object]]:
    """The heartbeat's call: list at most one InferencePool where the operator watches (a read that
    goes through authentication, authorization and etcd, and returns almost nothing)."""
    custom = client.CustomObjectsApi(api)

    async def call() -> object:
        metrics.API_REQUESTS.labels(verb="list", kind="InferencePool").inc()
        if namespaces:
            return await custom.list_namespaced_custom_object(
                GROUP, VERSION, namespaces[0], PLURAL, limit=1, _request_timeout=timeout
            )
        return await custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, limit=1, _request_timeout=timeout)

    return call
