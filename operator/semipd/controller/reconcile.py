"""One idempotent, level-based reconcile of an InferencePool (the imperative shell).

It always re-reads the live object, evaluates it with the pure `evaluate()`, writes status only
when it changed, and turns condition transitions into Events. Handlers for create/resume/update
and the operator-wide resync loop all call `reconcile()`; bad input never raises out of it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

import kopf

from semipd.api.semantics import CapabilitiesOf, NodeInfo, Taint
from semipd.api.v1alpha1 import ConditionStatus, InferencePoolStatus
from semipd.controller import conditions as c
from semipd.controller import metrics
from semipd.controller.config import OperatorConfig
from semipd.controller.evaluate import evaluate
from semipd.controller.kube import PoolClient

_BAD_WHEN_TRUE = {c.INVALID_SPEC, c.DEGRADED}


def now_rfc3339() -> str:
    """Current time as metav1.Time renders it (seconds precision, Z)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_info(body: dict[str, Any]) -> NodeInfo:
    """The NodeInfo of a Node object."""
    meta, spec, status = body.get("metadata", {}), body.get("spec") or {}, body.get("status") or {}
    return NodeInfo(
        name=meta.get("name", ""),
        labels=dict(meta.get("labels") or {}),
        allocatable={k: str(v) for k, v in (status.get("allocatable") or {}).items()},
        taints=tuple(
            Taint(t.get("key", ""), t.get("value", ""), t.get("effect", "NoSchedule")) for t in spec.get("taints") or []
        ),
        unschedulable=bool(spec.get("unschedulable")),
    )


@dataclass
class OperatorContext:
    """Operator-wide state kept in Kopf's memo: clients, caches of watched objects, health."""

    config: OperatorConfig
    pools: PoolClient
    capabilities_of: CapabilitiesOf
    nodes: dict[str, NodeInfo] = field(default_factory=dict)
    known_pools: set[tuple[str, str]] = field(default_factory=set)
    locks: dict[tuple[str, str], asyncio.Lock] = field(default_factory=dict)
    last_success: float = field(default_factory=time.monotonic)
    close: Callable[[], Any] | None = None

    def lock(self, key: tuple[str, str]) -> asyncio.Lock:
        """One lock per InferencePool so handler and resync never interleave."""
        return self.locks.setdefault(key, asyncio.Lock())


def _normalized(status: dict[str, Any] | None) -> dict[str, Any]:
    return InferencePoolStatus.model_validate(status or {}).model_dump(by_alias=True, exclude_none=True, mode="json")


async def reconcile(
    ctx: OperatorContext, namespace: str, name: str, logger: logging.Logger | logging.LoggerAdapter[Any]
) -> None:
    """Bring one InferencePool's status (and, later, its children) to the desired state."""
    started = time.perf_counter()
    async with ctx.lock((namespace, name)):
        body = await ctx.pools.get(namespace, name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            ctx.known_pools.discard((namespace, name))
            return
        result = evaluate(
            body.get("spec") or {},
            body["metadata"].get("generation"),
            body.get("status"),
            list(ctx.nodes.values()),
            ctx.capabilities_of,
            now_rfc3339(),
        )
        patch = result.status_patch()
        if patch != _normalized(body.get("status")):
            await ctx.pools.patch_status(namespace, name, patch)
        for t in result.transitions:
            bad = (t.new.status == ConditionStatus.TRUE) == (t.type in _BAD_WHEN_TRUE)
            kopf.event(
                kopf.Body(cast(kopf.RawBody, body)),
                type="Warning" if bad and t.new.status != ConditionStatus.UNKNOWN else "Normal",
                reason=t.new.reason,
                message=f"{t.type}={t.new.status.value}: {t.new.message}"[:1024],
            )
        if result.problems:
            metrics.INVALID_SPECS.inc()
            logger.warning("InvalidSpec: %s", "; ".join(str(p) for p in result.problems))
    ctx.last_success = time.monotonic()
    metrics.RECONCILES.labels(result="invalid" if result.problems else "ok").inc()
    metrics.RECONCILE_SECONDS.observe(time.perf_counter() - started)


async def resync_forever(ctx: OperatorContext, logger: logging.Logger) -> None:
    """Re-reconcile every known InferencePool each `resync_interval` (the level-based safety net)."""
    while True:
        await asyncio.sleep(ctx.config.resync_interval)
        for namespace, name in sorted(ctx.known_pools):
            try:
                await reconcile(ctx, namespace, name, logger)
            except asyncio.CancelledError:
                raise
            except Exception:
                metrics.RECONCILES.labels(result="error").inc()
                logger.exception("resync of %s/%s failed; retrying next interval", namespace, name)
