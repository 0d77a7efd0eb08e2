"""KV-cache placement across node pools (pure): which pools take long prompts, and routing weights.

Input is the spec, one `KVPoolObservation` per node pool (ready replicas, mean KV-cache usage,
share of long prompts) and the placement currently published; output is the
`KVCachePlacementStatus` to publish. Prompts above `placement.kvCache.longContextThreshold` go to
the node pool(s) with the most free KV-cache tokens per replica; every pool takes short prompts.
The operator turns the result into llm-d `context-length-range` pod labels and HTTPRoute weights;
the fleet simulator's router reads the same status, so what the benchmark measures is what ships.

Capacity comes from the latency model's memory arithmetic (HBM x memory fraction minus weights,
over KV bytes per token), the same number the simulated engine sizes its KV pool with.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from semipd.api.v1alpha1 import (
    InferencePoolSpec,
    KVCachePlacementStatus,
    KVCachePolicy,
    KVCachePoolStatus,
    NodePool,
)
from semipd.perf.resolve import latency_model_for

__all__ = [
    "NO_STEERING_REASONS",
    "REASON_KEPT",
    "REASON_MOVED",
    "REASON_NO_READY_REPLICAS",
    "REASON_POLICY_OFF",
    "REASON_SELECTED",
    "REASON_THRESHOLD_AT_MAX_CONTEXT",
    "REASON_USAGE_UNKNOWN",
    "REASON_WITHIN_HYSTERESIS",
    "KVPoolObservation",
    "context_range",
    "kv_capacity_tokens",
    "plan_kv_placement",
    "steers",
]

REASON_SELECTED = "LongContextPoolsSelected"
"""No usable previous placement: long prompts go to the pool(s) with the most headroom."""
REASON_KEPT = "LongContextPoolsKept"
"""The current long-context pools still have the most headroom."""
REASON_WITHIN_HYSTERESIS = "WithinHysteresis"
"""Another pool has more headroom, but not by more than the hysteresis band: nothing moves."""
REASON_MOVED = "LongContextPoolsMoved"
"""Another pool's headroom passed the hysteresis band (or a long-context pool lost its replicas)."""
REASON_USAGE_UNKNOWN = "KVUsageUnknown"
"""A ready pool's KV usage is unknown: the current placement is kept (fail-static)."""
REASON_POLICY_OFF = "PolicyOff"
REASON_THRESHOLD_AT_MAX_CONTEXT = "ThresholdAtMaxContext"
REASON_NO_READY_REPLICAS = "NoReadyReplicas"

NO_STEERING_REASONS = frozenset({REASON_POLICY_OFF, REASON_THRESHOLD_AT_MAX_CONTEXT, REASON_NO_READY_REPLICAS})
"""Reasons under which long prompts are not steered: routers should ignore context length."""

_MESSAGE_LIMIT = 1024


@dataclass(frozen=True)
class KVPoolObservation:
    """What was observed of one node pool's KV cache."""

    name: str
    """Node pool name."""
    ready_replicas: int
    usage: float | None
    """Mean KV-cache usage fraction over ready replicas; None = unknown."""
    long_share: float | None = None
    """Fraction of this pool's prompts above the threshold; None = unknown."""

    def __post_init__(self) -> None:
        if self.ready_replicas < 0:
            raise ValueError(f"node pool {self.name}: ready_replicas must be >= 0, got {self.ready_replicas}")
        for field, value in (("usage", self.usage), ("long_share", self.long_share)):
            if value is not None and not 0.0 <= value <= 1.0:  # also rejects NaN
                raise ValueError(f"node pool {self.name}: {field} must be a fraction in [0, 1], got {value}")


def kv_capacity_tokens(spec: InferencePoolSpec, pool: NodePool) -> int:
    """KV-cache capacity of one replica of `pool`, in tokens.

    `nodePools[].kvCacheTokens` when set; otherwise the latency model's: (HBM x memory fraction -
    weights) per device over KV bytes per token per device, for `acceleratorsPerReplica` devices.
    Raises `semipd.perf.ModelFitError` (a ValueError) when the weights do not fit.
    """
    if pool.kv_cache_tokens is not None:
        return pool.kv_cache_tokens
    return latency_model_for(spec, pool).kv_capacity_tokens()


def context_range(low: int, high: int) -> str:
    """The llm-d `context-length-range` label value for prompts of `low`..`high` tokens."""
    return f"{low}-{high}"


def steers(status: KVCachePlacementStatus | None) -> bool:
    """Whether a published placement steers by context length (routers ignore it otherwise)."""
    return status is not None and status.reason not in NO_STEERING_REASONS


def _percents(amounts: Sequence[float]) -> list[int]:
    """Integer percents proportional to `amounts` summing to 100 (largest remainder, ties to the first)."""
    total = sum(amounts)
    if total <= 0:
        return [0] * len(amounts)
    exact = [100.0 * a / total for a in amounts]
    floors = [math.floor(x) for x in exact]
    order = sorted(range(len(amounts)), key=lambda i: (-(exact[i] - floors[i]), i))
    for i in order[: 100 - sum(floors)]:
        floors[i] += 1
    return floors


@dataclass(frozen=True)
class _Pool:
    name: str
    capacity: int
    ready: int
    usage: float | None
    long_share: float | None

    @property
    def headroom(self) -> float | None:
        return None if self.usage is None else self.capacity * (1.0 - self.usage)


def _pools(spec: InferencePoolSpec, observed: Mapping[str, KVPoolObservation]) -> list[_Pool]:
    names = {p.name for p in spec.node_pools}
    unknown = sorted(set(observed) - names)
    if unknown:
        raise ValueError(f"observations for node pools not in the spec: {unknown}; spec has {sorted(names)}")
    for key, seen in observed.items():
        if seen.name != key:
            raise ValueError(f"observation keyed {key!r} is for node pool {seen.name!r}")
    out = []
    for pool in spec.node_pools:
        obs = observed.get(pool.name)
        out.append(
            _Pool(
                name=pool.name,
                capacity=kv_capacity_tokens(spec, pool),
                ready=0 if obs is None else obs.ready_replicas,
                usage=None if obs is None or obs.ready_replicas == 0 else obs.usage,
                long_share=None if obs is None else obs.long_share,
            )
        )
    return out


def _displaced(member: _Pool, ready: Sequence[_Pool], hysteresis: float) -> bool:
    """A long-context pool moves only when some pool's headroom beats its own by > hysteresis x its capacity."""
    assert member.headroom is not None
    best = max(p.headroom for p in ready if p.headroom is not None)
    return best > member.headroom + hysteresis * member.capacity


def _select(ready: Sequence[_Pool], hysteresis: float) -> list[str]:
    """Pools within the hysteresis band of the most headroom; by construction none is displaced at once."""
    return [p.name for p in ready if not _displaced(p, ready, hysteresis)]


def _describe(pools: Sequence[_Pool]) -> str:
    parts = []
    for p in pools:
        if p.ready == 0:
            parts.append(f"{p.name} 0 ready (capacity {p.capacity})")
        elif p.headroom is None:
            parts.append(f"{p.name} {p.ready} ready, usage unknown (capacity {p.capacity})")
        else:
            parts.append(
                f"{p.name} {p.ready} ready, headroom {round(p.headroom)} of {p.capacity} tokens/replica "
                f"(usage {100.0 * (p.usage or 0.0):.1f}%)"
            )
    return "; ".join(parts)


def _long_request_share(pools: Sequence[_Pool]) -> float | None:
    """Mean of the pools' long-prompt shares weighted by ready replicas (a proxy for their traffic)."""
    known = [(p.long_share, p.ready) for p in pools if p.long_share is not None and p.ready > 0]
    weight = sum(r for _, r in known)
    if weight == 0:
        return None
    return min(1.0, max(0.0, sum(s * r for s, r in known) / weight))


def plan_kv_placement(
    spec: InferencePoolSpec,
    observed: Mapping[str, KVPoolObservation],
    current: KVCachePlacementStatus | None,
    now: str,
) -> KVCachePlacementStatus:
    """The KV-cache placement to publish at time `now` (an RFC 3339 timestamp), given the current one.

    Short prompts (<= threshold) go to every pool with ready replicas, weighted by total KV capacity
    (ready replicas x capacity per replica); long prompts go to the long-context pools only, weighted
    the same way among them. Deterministic in its inputs.
    """
    kv = spec.placement.kv_cache
    threshold = kv.long_context_threshold
    top = spec.model.max_context_length
    pools = _pools(spec, observed)
    ready = [p for p in pools if p.ready > 0]
    ready_names = {p.name for p in ready}
    # A placement published without steering is no previous choice of long-context pools.
    chosen = [] if current is None or current.reason in NO_STEERING_REASONS else list(current.long_context_pools)
    previous = [n for n in chosen if n in ready_names]
    lost = [n for n in chosen if n not in ready_names]
    long_pools: list[str] = []
    hysteresis = kv.hysteresis
    long_share = _long_request_share(pools)
    share_text = "unknown" if long_share is None else f"{100.0 * long_share:.1f}%"

    steering = True
    if kv.policy == KVCachePolicy.OFF:
        reason, steering = REASON_POLICY_OFF, False
        why = "placement.kvCache.policy is off: every pool takes every prompt length"
    elif threshold >= top:
        reason, steering = REASON_THRESHOLD_AT_MAX_CONTEXT, False
        why = (
            f"longContextThreshold {threshold} >= model.maxContextLength {top}: no prompt is long, every pool "
            "takes every prompt length"
        )
    elif not ready:
        reason, steering = REASON_NO_READY_REPLICAS, False
        why = "no node pool has ready replicas"
    elif any(p.headroom is None for p in ready):
        reason = REASON_USAGE_UNKNOWN
        unknown = [p.name for p in ready if p.headroom is None]
        if previous:
            long_pools = previous
            why = f"KV usage unknown for {', '.join(unknown)}: keeping long prompts on {', '.join(long_pools)}"
        else:
            steering = False
            why = f"KV usage unknown for {', '.join(unknown)} and no previous placement: every pool takes long prompts"
    elif previous and not lost and not any(_displaced(p, ready, hysteresis) for p in ready if p.name in previous):
        long_pools = previous
        best = max(ready, key=lambda p: p.headroom or 0.0)
        kept_best = max(p.headroom or 0.0 for p in ready if p.name in previous)
        reason = REASON_KEPT if kept_best >= (best.headroom or 0.0) else REASON_WITHIN_HYSTERESIS
        why = f"keeping long prompts on {', '.join(long_pools)}"
        if reason == REASON_WITHIN_HYSTERESIS:
            why += f" ({best.name} has more headroom, but by no more than {hysteresis:g} x capacity)"
    else:
        long_pools = _select(ready, hysteresis)
        if not chosen:
            reason = REASON_SELECTED
            why = f"long prompts to {', '.join(long_pools)} (most KV headroom per replica)"
        else:
            reason = REASON_MOVED
            cause = (
                f"{', '.join(lost)} lost its ready replicas" if lost else f"headroom passed {hysteresis:g} x capacity"
            )
            why = f"long prompts move from {', '.join(chosen)} to {', '.join(long_pools)} ({cause})"

    if not steering:
        long_pools = [p.name for p in ready]
    long_set = set(long_pools)
    short_weights = _percents([p.ready * p.capacity for p in pools])
    long_weights = _percents([p.ready * p.capacity if p.name in long_set else 0.0 for p in pools])
    statuses = [
        KVCachePoolStatus(
            name=p.name,
            capacity_tokens=p.capacity,
            usage=p.usage,
            headroom_tokens=None if p.headroom is None else round(p.headroom),
            context_range=context_range(0, top if not steering or p.name in long_set else threshold),
            short_weight=sw,
            long_weight=lw,
        )
        for p, sw, lw in zip(pools, short_weights, long_weights, strict=True)
    ]
    ordered = [p.name for p in pools if p.name in long_set]
    changed = current is None or list(current.long_context_pools) != ordered
    last_change = now if changed or current is None else current.last_change or now
    message = (
        f"{why}. Threshold {threshold} of max context {top} tokens; long prompts {share_text}; "
        f"hysteresis {hysteresis:g}; {_describe(pools)}"
    )
    return KVCachePlacementStatus(
        threshold=threshold,
        long_context_pools=ordered,
        long_request_share=long_share,
        pools=statuses,
        last_change=last_change,
        reason=reason,
        message=message[:_MESSAGE_LIMIT],
    )
