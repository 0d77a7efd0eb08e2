"""observe_pool: a pod of an engine without a split counts as running both phases on the whole device.

Without that, the planner's SLO check (which needs each pod's shares) never saw a vLLM pod miss its
SLO, so a vLLM pool never scaled out on latency: found by e2e/test_real_vllm.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

from semipd.observe.fleet import observe_pool
from tests.engines.test_engine_drivers import pool_spec


class OneValuePerPod:
    """A stand-in Prometheus answering every query with 1.0 for pod `p-0` (pure code under test)."""

    async def query(self, promql: str) -> list[tuple[dict[str, str], float | None]]:
        return [({"pod": "p-0"}, 1.0)]


def ready_pod() -> dict[str, Any]:
    return {
        "metadata": {"name": "p-0"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def observe(kind: str, splits: dict[str, tuple[int, int]]) -> Any:
    spec = pool_spec(kind)
    obs = asyncio.run(observe_pool(OneValuePerPod(), spec, "ml", {"pool": [ready_pod()]}, splits, 0.0))  # type: ignore[arg-type]
    (pod,) = obs.pods
    return pod


def test_a_pod_without_a_split_is_observed_at_the_whole_device() -> None:
    pod = observe("vllm", {})
    assert (pod.prefill_percent, pod.decode_percent) == (100, 100)
    assert pod.ttft_p99 == 1.0


def test_a_splitting_engine_whose_agent_did_not_answer_stays_unknown() -> None:
    pod = observe("sim", {})
    assert (pod.prefill_percent, pod.decode_percent) == (None, None)
    assert observe("sim", {"p-0": (40, 100)}).prefill_percent == 40


class RecentWindow:
    """Answers over the recent window (30 s of the 60 s SLO window): the per-pod ITL quantile with 0.07
    and the per-pod request rate with 4.0; everything else with 1.0."""

    async def query(self, promql: str) -> list[tuple[dict[str, str], float | None]]:
        if "[30s]" in promql and "inter_token" in promql:
            return [({"pod": "p-0"}, 0.07)]
        if "[30s]" in promql and "e2e_request_latency_seconds_count" in promql:
            return [({"pod": "p-0"}, 4.0)]
        return [({"pod": "p-0"}, 1.0)]


def test_each_pod_is_also_observed_over_the_recent_window() -> None:
    spec = pool_spec("sim", slo={"window": "1m"})
    obs = asyncio.run(observe_pool(RecentWindow(), spec, "ml", {"pool": [ready_pod()]}, {"p-0": (60, 100)}, 0.0))  # type: ignore[arg-type]
    (pod,) = obs.pods
    assert obs.recent_window_s == 30.0
    assert (pod.itl_p99_recent, pod.itl_p99) == (0.07, 1.0)
    assert (pod.request_rate_recent, pod.request_rate) == (4.0, 1.0)
