"""The simulated Prometheus + pod cache + agents, as the operator's `observe_pool` sees them.

Per ready pod and per node pool: p99 TTFT and ITL as `histogram_quantile(0.99, sum by (le)
(rate(<hist>_bucket[window])))` over the engine's own bucket edges (what the shipped planner sees
in production, bucket quantization included), per pod also p99 ITL and the finished-request rate
over the recent window, finished-request and token rates from counter increases, running/queued/KV
gauges from the last scrape, splits from the agents. Missing data is None, never zero (a pod without
two scrapes in the window has no rate series).
"""

from __future__ import annotations

import math

from semipd.api.durations import to_seconds
from semipd.api.v1alpha1 import InferencePoolSpec
from semipd.policy.observation import NodePoolObservation, Observation, PodObservation, recent_window
from semipd.sim.fleet.controller import FleetView
from semipd.sim.fleet.metrics import WindowDelta, histogram_quantile, sum_counts


def _q(q: float, bounds: tuple[float, ...], counts: tuple[int, ...]) -> float | None:
    if not counts:
        return None
    v = histogram_quantile(q, bounds, counts)
    return None if math.isnan(v) else v


def observe(view: FleetView, spec: InferencePoolSpec, quantile: float = 0.99) -> Observation:
    """The Observation plan() gets for `spec`'s node pools at view.now."""
    window = max(1.0, float(round(to_seconds(spec.slo.window))))
    recent = recent_window(window)
    now = view.now
    pools: dict[str, NodePoolObservation] = {}
    pods: list[PodObservation] = []
    newest = -math.inf
    pool_views = view.pools()
    for np in spec.node_pools:
        pv = pool_views[np.name]
        members = pv.members()
        pending, since = pv.unschedulable()
        ready = pv.ready()
        if not ready:
            pools[np.name] = NodePoolObservation(
                np.name, len(members), 0, pending, since, request_rate=None if members else 0.0
            )
            continue
        deltas: list[WindowDelta] = []
        running = queued = 0.0
        kv = 0.0
        for inst in sorted(ready, key=lambda i: i.name):
            series = view.series(inst)
            newest = max(newest, series.last_time)
            d = series.window(now, window)
            recent_d = series.window(now, recent)
            g = series.gauges
            ttft_b = inst.counters.ttft.bounds
            itl_b = inst.counters.itl.bounds
            split = inst.split()
            if d is not None:
                deltas.append(d)
            if g is not None:
                running += g.running
                queued += g.queued
                kv = max(kv, g.kv_usage)
            pods.append(
                PodObservation(
                    pod=inst.name,
                    node_pool=np.name,
                    ready=True,
                    ttft_p99=_q(quantile, ttft_b, d.ttft) if d else None,
                    itl_p99=_q(quantile, itl_b, d.itl) if d else None,
                    request_rate=d.rate(d.finished) if d else None,
                    prompt_tokens_rate=d.rate(d.prompt_tokens) if d else None,
                    generation_tokens_rate=d.rate(d.generation_tokens) if d else None,
                    running=float(g.running) if g else None,
                    queued=float(g.queued) if g else None,
                    kv_usage=g.kv_usage if g else None,
                    prefill_percent=split[0] if split else None,
                    decode_percent=split[1] if split else None,
                    itl_p99_recent=_q(quantile, itl_b, recent_d.itl) if recent_d else None,
                    request_rate_recent=recent_d.rate(recent_d.finished) if recent_d else None,
                )
            )
        ttft_b = ready[0].counters.ttft.bounds
        itl_b = ready[0].counters.itl.bounds
        has = bool(deltas)
        pools[np.name] = NodePoolObservation(
            np.name,
            len(members),
            len(ready),
            pending,
            since,
            ttft_p99=_q(quantile, ttft_b, sum_counts([d.ttft for d in deltas])) if has else None,
            itl_p99=_q(quantile, itl_b, sum_counts([d.itl for d in deltas])) if has else None,
            request_rate=sum(d.rate(d.finished) for d in deltas) if has else None,
            prompt_tokens_rate=sum(d.rate(d.prompt_tokens) for d in deltas) if has else None,
            generation_tokens_rate=sum(d.rate(d.generation_tokens) for d in deltas) if has else None,
            running=running,
            queued=queued,
            kv_usage=kv,
        )
    age = max(0.0, now - newest) if math.isfinite(newest) else 0.0
    return Observation(time=now, pools=pools, pods=tuple(pods), available=True, age=age, recent_window_s=recent)
