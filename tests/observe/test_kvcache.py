"""KV-cache observation: the long-prompt share from a prompt-length histogram, mean usage, staleness."""

from __future__ import annotations

import math
from typing import Any

import pytest

from semipd.api.v1alpha1 import InferencePoolSpec
from semipd.observe.kvcache import mean_usage, observe_kv_pools, share_above
from semipd.observe.prometheus import MetricsError, Series
from semipd.policy.observation import Observation, PodObservation

INF = math.inf


def test_share_is_exact_on_a_bucket_bound() -> None:
    # 10 prompts: 6 of at most 8192 tokens, 4 above.
    buckets = [(4096.0, 2.0), (8192.0, 6.0), (16384.0, 9.0), (INF, 10.0)]
    assert share_above(buckets, 8192) == pytest.approx(0.4)
    assert share_above(buckets, 16384) == pytest.approx(0.1)


def test_share_interpolates_inside_the_bucket_holding_the_threshold() -> None:
    buckets = [(8192.0, 6.0), (16384.0, 10.0), (INF, 10.0)]
    # 12288 is half way through (8192, 16384]: 6 + 2 below, 2 of 10 above.
    assert share_above(buckets, 12288) == pytest.approx(0.2)
    # Below the first bound: interpolated from 0.
    assert share_above(buckets, 4096) == pytest.approx(0.7)


def test_share_counts_the_overflow_bucket_as_long() -> None:
    buckets = [(8192.0, 6.0), (INF, 10.0)]
    assert share_above(buckets, 100_000) == pytest.approx(0.4)


def test_share_unknown_without_inf_bucket_samples_or_with_nan() -> None:
    assert share_above([(8192.0, 6.0)], 8192) is None
    assert share_above([(8192.0, 0.0), (INF, 0.0)], 8192) is None
    assert share_above([(8192.0, None), (INF, 3.0)], 8192) is None
    assert share_above([], 8192) is None


def test_share_is_clamped_when_rates_are_not_monotonic() -> None:
    assert share_above([(8192.0, 11.0), (INF, 10.0)], 8192) == 0.0


def spec(engine: str = "sim") -> InferencePoolSpec:
    return InferencePoolSpec.model_validate(
        {
            "model": {"name": "m", "source": "hf://m/m", "maxContextLength": 131072, "profile": "llama-3-8b"},
            "engine": {"kind": engine} if engine == "sim" else {"kind": engine, "image": "reg/x:1"},
            "nodePools": [
                {"name": "h200", "accelerator": "nvidia", "kvCacheTokens": 400_000},
                {"name": "ascend", "accelerator": "ascend", "kvCacheTokens": 200_000},
            ],
            "slo": {"ttftP99": "1s", "itlP99": "60ms", "window": "30s"},
            "autoscaling": {"interval": "10s"},
            "placement": {"kvCache": {"longContextThreshold": 8192}},
        }
    )


def pod(name: str, ready: bool = True) -> dict[str, Any]:
    cond = {"type": "Ready", "status": "True" if ready else "False"}
    return {"metadata": {"name": name, "namespace": "ml"}, "status": {"phase": "Running", "conditions": [cond]}}


def observation(age: float = 1.0, available: bool = True) -> Observation:
    return Observation(
        time=0.0,
        available=available,
        age=age,
        pods=(
            PodObservation("h200-a", "h200", kv_usage=0.2),
            PodObservation("h200-b", "h200", kv_usage=0.6),
            PodObservation("ascend-a", "ascend", kv_usage=None),
        ),
    )


class FakeSource:
    """Answers histogram queries per node pool by the pod names in the selector."""

    def __init__(self, answers: dict[str, list[tuple[Series, float | None]]], fail: bool = False) -> None:
        self.answers, self.fail = answers, fail
        self.queries: list[str] = []

    async def query(self, promql: str) -> list[tuple[Series, float | None]]:
        self.queries.append(promql)
        if self.fail:
            raise MetricsError("down")
        return next((v for k, v in self.answers.items() if k in promql), [])


def buckets(*pairs: tuple[str, float]) -> list[tuple[Series, float | None]]:
    return [({"le": le}, v) for le, v in pairs]


def test_mean_usage_over_known_ready_pods_and_none_when_stale() -> None:
    assert mean_usage(observation(), "h200", 30.0) == pytest.approx(0.4)
    assert mean_usage(observation(), "ascend", 30.0) is None
    assert mean_usage(observation(age=31.0), "h200", 30.0) is None
    assert mean_usage(observation(available=False), "h200", 30.0) is None


async def test_observe_kv_pools_per_node_pool() -> None:
    src = FakeSource({"h200-a|h200-b": buckets(("8192.0", 3.0), ("+Inf", 4.0))})
    pods = {"h200": [pod("h200-a"), pod("h200-b"), pod("h200-c", ready=False)], "ascend": [pod("ascend-a")]}
    got = await observe_kv_pools(src, spec(), "ml", pods, observation())  # type: ignore[arg-type]
    assert got["h200"].ready_replicas == 2
    assert got["h200"].usage == pytest.approx(0.4)
    assert got["h200"].long_share == pytest.approx(0.25)
    assert got["ascend"].ready_replicas == 1
    assert got["ascend"].usage is None
    assert got["ascend"].long_share is None  # no histogram samples for its pods
    h200_query = next(q for q in src.queries if "h200-a" in q)
    assert h200_query == (
        'sum by (le) (rate(sglang:prompt_tokens_histogram_bucket{namespace="ml",pod=~"h200-a|h200-b"}[30s]))'
    )


async def test_observe_kv_pools_fails_soft() -> None:
    pods = {"h200": [pod("h200-a")], "ascend": []}
    got = await observe_kv_pools(FakeSource({}, fail=True), spec(), "ml", pods, observation())  # type: ignore[arg-type]
    assert got["h200"].long_share is None
    assert got["h200"].usage == pytest.approx(0.4)
    assert got["ascend"].ready_replicas == 0
    assert got["ascend"].usage is None


async def test_engines_without_a_prompt_histogram_are_not_queried() -> None:
    src = FakeSource({})
    pods = {"h200": [pod("h200-a")], "ascend": [pod("ascend-a")]}
    got = await observe_kv_pools(src, spec("sglang-semipd"), "ml", pods, observation())  # type: ignore[arg-type]
    assert src.queries == []
    assert got["h200"].long_share is None
