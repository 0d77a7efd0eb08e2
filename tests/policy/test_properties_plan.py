"""Property: plan() never raises for any admitted spec and any observation, keeps replicas within
each node pool's bounds and splits within the semi-PD bounds, holds everything when metrics are
unavailable, and its decisions render into a status the CRD schema accepts."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from semipd.api.v1alpha1 import InferencePoolStatus
from semipd.context.pool import pool_facts
from semipd.controller.autoscale import status_decision
from semipd.policy.observation import NodePoolObservation, Observation, PodObservation
from semipd.policy.planner import plan
from semipd.policy.state import ControllerState
from tests.api.offline_schema import schema_failures
from tests.api.spec_strategies import STATUS_SCHEMA, admitted, raw_specs

NOW = 1_000_000.0
metric = st.one_of(st.none(), st.floats(0, 50, allow_nan=False, allow_infinity=False))


@st.composite
def observations(draw: st.DrawFn, node_pools: list[str]) -> Observation:
    pools, pods = {}, []
    for name in node_pools:
        replicas = draw(st.integers(0, 6))
        ready = draw(st.integers(0, replicas))
        pending = draw(st.integers(0, replicas - ready))
        pools[name] = NodePoolObservation(
            name, replicas, ready, pending, NOW - draw(st.floats(0, 600)) if pending else None,
            ttft_p99=draw(metric), itl_p99=draw(metric), request_rate=draw(metric),
            prompt_tokens_rate=draw(metric), generation_tokens_rate=draw(metric),
            running=draw(metric), queued=draw(metric), kv_usage=draw(st.one_of(st.none(), st.floats(0, 1))),
        )  # fmt: skip
        for i in range(ready):
            split = draw(st.one_of(st.none(), st.tuples(st.integers(1, 99), st.integers(1, 100))))
            pod = PodObservation(
                f"{name}-{i}", name, ttft_p99=draw(metric), itl_p99=draw(metric), request_rate=draw(metric),
                running=draw(metric), queued=draw(metric),
                prefill_percent=split[0] if split else None, decode_percent=split[1] if split else None,
            )  # fmt: skip
            pods.append(pod)
    return Observation(
        time=NOW, pools=pools, pods=tuple(pods), available=draw(st.booleans()), age=draw(st.floats(0, 600))
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(raw=raw_specs(), data=st.data())
def test_plan_never_raises_and_stays_in_bounds(raw: dict[str, Any], data: st.DataObject) -> None:
    spec = admitted(raw)
    assume(spec is not None)
    assert spec is not None
    try:
        contexts = pool_facts(spec).planner_contexts()
    except ValueError:
        return  # no performance model for this accelerator/model: evaluate() reports it
    obs = data.draw(observations([np.name for np in spec.node_pools]))
    current = {np.name: data.draw(st.integers(0, 10)) for np in spec.node_pools}
    since = st.dictionaries(st.sampled_from(["*", *current]), st.floats(NOW - 3600, NOW), max_size=3)
    state = ControllerState(slack_since=data.draw(since), breach_since=data.draw(since), last_scale=data.draw(since))
    result = plan(spec, obs, state, current, contexts)
    clamped = {np.name: max(np.min_replicas, min(np.max_replicas, current[np.name])) for np in spec.node_pools}
    for np in spec.node_pools:
        assert np.min_replicas <= result.replicas[np.name] <= np.max_replicas
    sp = spec.semi_pd
    pods = {p.pod for p in obs.pods}
    for change in result.splits:
        assert change.pod in pods
        assert sp.min_prefill_percent <= change.prefill_percent <= sp.max_prefill_percent
    if not obs.available:
        assert not result.metrics_available
        assert result.replicas == clamped
        assert result.splits == ()
    status = InferencePoolStatus.model_validate(
        {"decisions": [status_decision(d).model_dump(by_alias=True, exclude_none=True, mode="json")
                       for d in result.decisions]}
    )  # fmt: skip
    rendered = status.model_dump(by_alias=True, exclude_none=True, mode="json")
    assert schema_failures(STATUS_SCHEMA, rendered) == []
