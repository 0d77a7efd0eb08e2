"""Build one InferencePool's `Observation` from Prometheus (engine metrics), the pod cache
(readiness, scheduling) and the agents (current splits).

PromQL comes from each node pool's engine driver (`MetricSet`), so a vLLM pool and a simulated
pool are read through their own metric names. Queries select pods by name; missing series and NaN
are None ("unknown"), never zero.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from semipd.api.durations import to_seconds
from semipd.api.timestamps import epoch_of
from semipd.api.v1alpha1 import InferencePoolSpec
from semipd.engines import get_driver
from semipd.engines.promql import MetricSet
from semipd.observe.prometheus import FAULTS, MetricsError, PrometheusSource, Series
from semipd.policy.observation import NodePoolObservation, Observation, PodObservation, recent_window


def fault_reason(obs: Observation) -> str | None:
    """The MetricsAvailable reason naming why Prometheus gave no usable answer (None when it did)."""
    head = obs.reason.split(":", 1)[0]
    return head if not obs.available and head in FAULTS else None


def pod_ready(pod: Mapping[str, Any]) -> bool:
    """Running with condition Ready=True (what routers and the planner count)."""
    status = pod.get("status") or {}
    conds = status.get("conditions") or []
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in conds
    )


def pods_unlisted(
    deployments: Mapping[str, Mapping[str, Any] | None], pods_by_node_pool: Mapping[str, Sequence[Mapping[str, Any]]]
) -> str | None:
    """Why the pod cache does not yet hold a node pool's pods, or None when it may be trusted.

    The watch cache has no "synced" signal from Kopf, and a restarted operator lists its children while
    its autoscaler already runs: a node pool whose Deployment is not cached yet, or whose Deployment
    counts more Ready pods than the cache holds, is still being listed (an evaluation then saw no Ready
    replica and published a KV-cache placement without them; 500-pool soak: 236 status rewrites in
    the two minutes after a restart). A pod Ready a moment before its Deployment's status says so is fine.
    """
    for np_name, dep in deployments.items():
        if dep is None:
            return f"Deployment of node pool {np_name} not listed yet"
        counted = int((dep.get("status") or {}).get("readyReplicas") or 0)
        cached = sum(1 for p in pods_by_node_pool.get(np_name, ()) if pod_ready(p))
        if cached < counted:
            return f"{cached} of node pool {np_name}'s {counted} Ready pods listed yet"
    return None


def unschedulable(pods: Sequence[Mapping[str, Any]]) -> tuple[int, float | None]:
    """How many pods the scheduler could not place, and since when the oldest has waited."""
    count, since = 0, None
    for pod in pods:
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if (cond.get("type"), cond.get("status"), cond.get("reason")) == ("PodScheduled", "False", "Unschedulable"):
                count += 1
                t = epoch_of(cond.get("lastTransitionTime"))
                if t is not None:
                    since = t if since is None else min(since, t)
    return count, since


def pod_selector(namespace: str, pods: Sequence[Mapping[str, Any]]) -> str:
    """PromQL matchers for exactly these pods (pod names are DNS labels: no regex metacharacters)."""
    names = "|".join(sorted(p["metadata"]["name"] for p in pods))
    return f'namespace="{namespace}",pod=~"{names}"'


def window_seconds(spec: InferencePoolSpec) -> int:
    """The SLO window in whole seconds (a PromQL range)."""
    return max(1, round(to_seconds(spec.slo.window)))


def window(spec: InferencePoolSpec) -> str:
    """The PromQL range of rates: the SLO window."""
    return f"{window_seconds(spec)}s"


class _Queries:
    """The PromQL for one node pool's pods."""

    def __init__(self, metrics: MetricSet, selector: str, window: str, recent: str) -> None:
        by = ["pod"]
        prompt, gen = metrics.token_rates(window, by=by, selector=selector)
        pool_prompt, pool_gen = metrics.token_rates(window, selector=selector)
        self.per_pod = {
            "ttft": metrics.ttft_quantile(0.99, window, by=by, selector=selector),
            "itl": metrics.itl_quantile(0.99, window, by=by, selector=selector),
            "rate": metrics.request_rate(window, by=by, selector=selector),
            "prompt": prompt,
            "gen": gen,
            "running": metrics.running_requests(by=by, selector=selector),
            "queued": metrics.queue_length(by=by, selector=selector),
            "kv": metrics.kv_usage_max(by=by, selector=selector),
        }
        self.pool = {
            "ttft": metrics.ttft_quantile(0.99, window, selector=selector),
            "itl": metrics.itl_quantile(0.99, window, selector=selector),
            "rate": metrics.request_rate(window, selector=selector),
            "prompt": pool_prompt,
            "gen": pool_gen,
            "running": metrics.running_requests(selector=selector),
            "queued": metrics.queue_length(selector=selector),
            "kv": metrics.kv_usage_max(selector=selector),
        }
        self.age = f"time() - max(timestamp({metrics.running}{{{selector}}}))"
        self.itl_recent = metrics.itl_quantile(0.99, recent, by=by, selector=selector)
        self.rate_recent = metrics.request_rate(recent, by=by, selector=selector)


def _by_pod(result: list[tuple[Series, float | None]]) -> dict[str, float | None]:
    return {labels.get("pod", ""): value for labels, value in result}


def _scalar(result: list[tuple[Series, float | None]]) -> float | None:
    return result[0][1] if result else None


async def observe_pool(
    source: PrometheusSource,
    spec: InferencePoolSpec,
    namespace: str,
    pods_by_node_pool: Mapping[str, Sequence[Mapping[str, Any]]],
    splits: Mapping[str, tuple[int, int]],
    now: float,
) -> Observation:
    """The fleet of one InferencePool at wall-clock time `now` (epoch seconds)."""
    range_ = window(spec)
    recent_s = recent_window(window_seconds(spec))
    pools: dict[str, NodePoolObservation] = {}
    pod_obs: list[PodObservation] = []
    ages: list[float] = []
    try:
        for np in spec.node_pools:
            pods = pods_by_node_pool.get(np.name, [])
            pending, since = unschedulable(pods)
            ready = [p for p in pods if pod_ready(p)]
            if not ready:
                pools[np.name] = NodePoolObservation(
                    np.name, len(pods), 0, pending, since, request_rate=None if pods else 0.0
                )
                continue
            selector = pod_selector(namespace, ready)
            driver = get_driver(spec.effective_engine(np).kind)
            q = _Queries(driver.metrics, selector, range_, f"{recent_s:.0f}s")
            # An engine without a split runs both phases on the whole device: (100, 100), as the agent's
            # default says, so its pods are judged against the SLO like any other (no split is "unread").
            whole_device = None if driver.capabilities.supports_split else (100, 100)
            keys = list(q.per_pod)
            results = await asyncio.gather(
                *(source.query(q.per_pod[k]) for k in keys),
                *(source.query(q.pool[k]) for k in keys),
                source.query(q.age),
                source.query(q.itl_recent),
                source.query(q.rate_recent),
            )
            per_pod = {k: _by_pod(r) for k, r in zip(keys, results[: len(keys)], strict=True)}
            pool = {k: _scalar(r) for k, r in zip(keys, results[len(keys) : 2 * len(keys)], strict=True)}
            age = _scalar(results[-3])
            itl_recent = _by_pod(results[-2])
            rate_recent = _by_pod(results[-1])
            if age is not None:
                ages.append(age)
            for p in ready:
                name = p["metadata"]["name"]
                split = splits.get(name) or whole_device
                pod_obs.append(
                    PodObservation(
                        pod=name,
                        node_pool=np.name,
                        ready=True,
                        ttft_p99=per_pod["ttft"].get(name),
                        itl_p99=per_pod["itl"].get(name),
                        request_rate=per_pod["rate"].get(name),
                        prompt_tokens_rate=per_pod["prompt"].get(name),
                        generation_tokens_rate=per_pod["gen"].get(name),
                        running=per_pod["running"].get(name),
                        queued=per_pod["queued"].get(name),
                        kv_usage=per_pod["kv"].get(name),
                        prefill_percent=split[0] if split else None,
                        decode_percent=split[1] if split else None,
                        itl_p99_recent=itl_recent.get(name),
                        request_rate_recent=rate_recent.get(name),
                    )
                )
            rate = pool["rate"]
            if rate is None and all(per_pod["rate"].get(p["metadata"]["name"]) is not None for p in ready):
                rate = sum(v for v in per_pod["rate"].values() if v is not None)
            pools[np.name] = NodePoolObservation(
                np.name, len(pods), len(ready), pending, since,
                ttft_p99=pool["ttft"], itl_p99=pool["itl"], request_rate=rate,
                prompt_tokens_rate=pool["prompt"], generation_tokens_rate=pool["gen"],
                running=pool["running"], queued=pool["queued"], kv_usage=pool["kv"],
            )  # fmt: skip
    except MetricsError as err:
        return Observation(time=now, available=False, reason=str(err)[:512])
    age = max(ages) if ages else 0.0
    return Observation(
        time=now, pools=pools, pods=tuple(pod_obs), available=True, age=max(0.0, age), recent_window_s=recent_s
    )
