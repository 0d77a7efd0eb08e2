"""A perturbed ground truth changes the simulated world, never the policy's prior."""

from __future__ import annotations

import pytest

from semipd.perf import TAKE_TURNS, ContentionModel
from semipd.perf.resolve import latency_model_for
from semipd.sim.fleet.fleet import simulate
from semipd.sim.fleet.policy import PolicyController
from semipd.sim.fleet.setup import fleet_from_spec
from semipd.sim.fleet.truth import Truth, with_truth
from semipd.traces import prepare
from tests.sim.fleet.test_policy import spec as spec_with


def test_perturbed_truth_changes_the_world_and_not_the_prior() -> None:
    spec = spec_with()
    prior_setup = fleet_from_spec(spec)
    truth = Truth(1.3, 0.7, ContentionModel(0.8, 0.3, 0.3))
    world = with_truth(prior_setup, truth)
    prior_model = latency_model_for(spec, spec.node_pools[0])
    world_model = world.pools[0].model
    assert prior_setup.pools[0].model.prefill_time([2000], 1.0) == prior_model.prefill_time([2000], 1.0)
    assert world_model.prefill_time([2000], 1.0) == pytest.approx(1.3 * prior_model.prefill_time([2000], 1.0), rel=0.1)
    assert world_model.decode_step_time(16, 16000, 1.0) == pytest.approx(
        0.7 * prior_model.decode_step_time(16, 16000, 1.0), rel=0.1
    )
    assert world_model.contention == ContentionModel(0.8, 0.3, 0.3)
    controller = PolicyController(spec)
    for ctx in controller.contexts.values():
        assert ctx.model.contention is TAKE_TURNS
        assert ctx.model.hardware == prior_model.hardware
    trace = prepare("azure-conv", rate=4.0, duration_s=120)
    a = simulate(prior_setup, trace, PolicyController(spec))
    b = simulate(world, trace, PolicyController(spec))
    assert a.ttft_p50 != b.ttft_p50
    for r in (a, b):
        assert r.arrivals == r.finished + sum(r.rejected.values()) == r.finished + sum(r.lost.values())
        assert 0.0 <= r.slo_attainment <= 1.0


def test_truth_refuses_scales_out_of_range() -> None:
    with pytest.raises(ValueError, match="prefill_scale must be in"):
        Truth(prefill_scale=10.0)
    assert with_truth(fleet_from_spec(spec_with()), Truth()).pools[0].model.contention is TAKE_TURNS
