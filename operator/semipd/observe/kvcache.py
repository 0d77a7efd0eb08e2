"""Observe each node pool's KV cache for the KV-cache placement step: ready replicas, mean KV usage
over them, and the share of prompts above the long-context threshold.

Usage is the mean of the per-pod values the autoscaler's observation already holds (no extra
query); the long-prompt share comes from the engine's prompt-length histogram (the driver's
`prompt_tokens_histogram`, see `MetricSet.prompt_length_buckets`), interpolated at the threshold
as `histogram_quantile` interpolates. Unknown, stale or NaN values are None, never zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from semipd.api.durations import to_seconds
from semipd.api.v1alpha1 import InferencePoolSpec
from semipd.engines import get_driver
from semipd.observe.fleet import pod_ready, pod_selector, window
from semipd.observe.prometheus import MetricsError, PrometheusSource
from semipd.policy.kvcache import KVPoolObservation
from semipd.policy.observation import Observation
from semipd.policy.planner import STALE_INTERVALS


def share_above(buckets: Sequence[tuple[float, float | None]], threshold: float) -> float | None:
    """Fraction of histogram observations above `threshold` from cumulative (le, count) buckets.

    Linear inside the bucket holding the threshold (exact when it is a bucket bound); everything in
    the +Inf bucket beyond the last finite bound counts as above. None without a +Inf bucket, with
    an unknown (NaN) bucket, or with no observations.
    """
    if any(count is None for _, count in buckets):
        return None
    points = sorted((le, float(count)) for le, count in buckets if count is not None)
    if not points or not math.isinf(points[-1][0]):
        return None
    total = points[-1][1]
    if total <= 0:
        return None
    below, prev_le, prev_count = 0.0, 0.0, 0.0
    for le, count in points:
        if le >= threshold:
            if math.isinf(le):
                below = prev_count
            else:
                below = prev_count + (count - prev_count) * (threshold - prev_le) / (le - prev_le)
            break
        prev_le, prev_count = le, count
    return min(1.0, max(0.0, 1.0 - below / total))


def mean_usage(obs: Observation, node_pool: str, max_age_s: float) -> float | None:
    """Mean KV usage over the node pool's ready pods with a known value; None when stale or none known."""
    if not obs.available or obs.age > max_age_s:
        return None
    values = [p.kv_usage for p in obs.pods if p.node_pool == node_pool and p.ready and p.kv_usage is not None]
    if not values:
        return None
    return min(1.0, max(0.0, sum(values) / len(values)))


async def long_prompt_share(
    source: PrometheusSource,
    spec: InferencePoolSpec,
    namespace: str,
    node_pool: str,
    ready: Sequence[Mapping[str, Any]],
) -> float | None:
    """Share of the node pool's prompts above the threshold over the SLO window; None when unknown."""
    if not ready:
        return None
    query = get_driver(spec.effective_engine(spec.node_pool(node_pool)).kind).metrics.prompt_length_buckets(
        window(spec), selector=pod_selector(namespace, ready)
    )
    if query is None:
        return None
    try:
        result = await source.query(query)
    except MetricsError:
        return None
    buckets = []
    for labels, value in result:
        try:
            buckets.append((float(labels.get("le", "")), value))
        except ValueError:
            return None
    return share_above(buckets, spec.placement.kv_cache.long_context_threshold)


async def observe_kv_pools(
    source: PrometheusSource,
    spec: InferencePoolSpec,
    namespace: str,
    pods_by_node_pool: Mapping[str, Sequence[Mapping[str, Any]]],
    obs: Observation,
) -> dict[str, KVPoolObservation]:
    """One `KVPoolObservation` per node pool, from the autoscaler's observation and the pod cache."""
    max_age = STALE_INTERVALS * to_seconds(spec.autoscaling.interval)
    out = {}
    for np in spec.node_pools:
        ready = [p for p in pods_by_node_pool.get(np.name, []) if pod_ready(p)]
        out[np.name] = KVPoolObservation(
            name=np.name,
            ready_replicas=len(ready),
            usage=mean_usage(obs, np.name, max_age) if ready else None,
            long_share=await long_prompt_share(source, spec, namespace, np.name, ready),
        )
    return out
