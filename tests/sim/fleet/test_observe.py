"""The simulated Prometheus gives plan() what the operator's PromQL would: rates from counter
increases over the scrapes inside the window, p99s by histogram_quantile over the engine buckets."""

from __future__ import annotations

from typing import Any

import pytest

from semipd.api.v1alpha1 import InferencePoolSpec
from semipd.engines.sim import SIM_METRICS
from semipd.policy.observation import Observation
from semipd.sim.fleet.metrics import Histogram, histogram_quantile
from semipd.sim.fleet.observe import observe
from semipd.traces import TraceRequest

from .helpers import fleet, pool, run

SPEC = InferencePoolSpec.model_validate(
    {
        "model": {"name": "m", "source": "hf://m/m", "profile": "llama-3-8b", "maxContextLength": 8192},
        "engine": {"kind": "sim"},
        "nodePools": [{"name": "gpu", "accelerator": "nvidia", "minReplicas": 2, "maxReplicas": 2}],
        "slo": {"ttftP99": "1s", "itlP99": "50ms", "window": "1m"},
    }
)


class Capture:
    name = "capture"
    interval_s = 15.0

    def __init__(self) -> None:
        self.seen: list[Observation] = []

    def control(self, view: Any) -> list[Any]:
        self.seen.append(observe(view, SPEC))
        return []

    def notes(self) -> list[Any]:
        return []


def test_observation_matches_the_requests_behind_it() -> None:
    trace = [TraceRequest(0.2 * k, 500 + 300 * (k % 7), 30 + k % 50) for k in range(900)]
    cap = Capture()
    sim = run(fleet(pool(2, prefill_percent=60)), trace, cap)
    obs = next(o for o in cap.seen if o.time > 120)
    t1 = max(t for t in range(0, 400, 15) if t <= obs.time)
    t0 = t1 - 45  # scrapes at t1-45 .. t1 are inside the left-open (t - 60, t] window
    assert obs.age == pytest.approx(obs.time - t1)
    assert len(obs.pods) == 2
    for pod in obs.pods:
        mine = [r for r in sim.requests if r.instance is not None and r.instance.name == pod.pod]
        finished = [r for r in mine if t0 < r.finish <= t1]
        assert pod.request_rate == pytest.approx(len(finished) / 45.0)
        h = Histogram(SIM_METRICS.ttft_buckets)
        for r in mine:
            if t0 < r.first_token <= t1:
                h.observe(r.ttft)
        assert pod.ttft_p99 == pytest.approx(histogram_quantile(0.99, SIM_METRICS.ttft_buckets, h.counts))
        assert (pod.prefill_percent, pod.decode_percent) == (60, 100)
    pool_obs = obs.pools["gpu"]
    assert pool_obs.replicas == pool_obs.ready == 2
    assert pool_obs.request_rate == pytest.approx(sum(p.request_rate or 0 for p in obs.pods))
    assert pool_obs.itl_p99 is not None
    assert 0 < pool_obs.itl_p99 < 0.05


def test_pods_without_two_scrapes_have_unknown_rates() -> None:
    cap = Capture()
    trace = [TraceRequest(0.5 * k, 200, 10) for k in range(30)] + [TraceRequest(150.0, 200, 10)]
    run(fleet(pool(2)), trace, cap)
    first = cap.seen[0]  # t = 15 s: scrapes at 0 and 15 exist, so rates are known
    assert all(p.request_rate is not None for p in first.pods)
    idle = [p for o in cap.seen for p in o.pods if p.request_rate == 0]
    assert idle
    assert all(p.ttft_p99 is None for p in idle)
