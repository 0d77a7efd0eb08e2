"""Restart mode's gates and price (policy.split_gates, and how policy.splits uses them): a restart waits
until the other pods carry its load at no more than RESTART_UTILIZATION of their capacity and for a
steady load, it is priced at what those pods lose carrying it, it is never a defence of an ITL that has
not broken, and a fix of a broken ITL must not saturate prefill (in any mode) nor, in restart mode, cost
TTFT."""

from __future__ import annotations

from dataclasses import replace

from semipd.api.durations import to_seconds
from semipd.perf import contended_shares
from semipd.policy.context import CAPACITY_MARGIN, Run
from semipd.policy.planner import plan
from semipd.policy.split_gates import (
    CALM_RESTART_LOSS,
    RESTART_UTILIZATION,
    itl_fix_allowed,
    restart_cost,
    restart_fixes_ttft,
)
from semipd.policy.splits import MEASURED_MARGIN
from tests.policy.test_planner import CURRENT, H200, POOLS, Estimator, Fit, known, observe, pod, spec

RESTART = {**POOLS, "h200": replace(POOLS["h200"], restart=True, split_cost_s=H200.restart_cost())}
PREFILL_ONLY = spec(semiPD__minDecodePercent=100)  # no decode canary: these tests are about restarts
THREE = {"h200": 3, "ascend": 0}


def _restart_decisions(others_rate: float, queued: float = 0.0) -> dict[str, str]:
    """p0 misses TTFT at (30, 100); two more pods at `others_rate`; `queued` requests wait in the node
    pool: what the restart-mode plan decides."""
    pods = [pod("p0", 4.5, (30, 100)), *(pod(f"p{i}", others_rate, (30, 100)) for i in (1, 2))]
    p = plan(PREFILL_ONLY, observe(pods, h200={"queued": queued}), known(), THREE, RESTART)
    return {d.action: d.reason for d in p.decisions if d.action.startswith("Split") and d.pod in ("p0", None)}


def test_a_restart_waits_until_the_others_carry_its_load_at_half_their_capacity() -> None:
    est = Estimator(POOLS["h200"].model, Fit())
    saturation = contended_shares(0.3, 1.0)[0] / est.l100()  # one pod at (30, 100): the queue stops draining
    # The two others could carry it with the old 10 % capacity margin, but not within RESTART_UTILIZATION.
    loaded = (2 * saturation * 0.9 - 4.5) / 2 - 0.5
    assert 4.5 + 2 * loaded > 2 * saturation * RESTART_UTILIZATION
    assert _restart_decisions(loaded) == {"SplitHeld": "RestartNeedsCapacity"}
    calm = (2 * saturation * RESTART_UTILIZATION - 4.5) / 2 - 0.2
    assert calm > 0
    assert _restart_decisions(calm) == {"SplitChange": "PredictedGain"}
    # A backlog of more than a second of arrivals: the pool does not keep up now, whatever the model says.
    assert _restart_decisions(calm, queued=1.0 + 4.5 + 2 * calm) == {"SplitHeld": "RestartNeedsCapacity"}
    assert _restart_decisions(calm, queued=1.0) == {"SplitChange": "PredictedGain"}


def _run(pods: list, restart: bool = True) -> Run:  # type: ignore[type-arg]
    s = PREFILL_ONLY
    return Run(
        spec=s, obs=observe(pods), state=known(), pools=RESTART if restart else POOLS, replicas=dict(THREE),
        decisions=[], ttft_slo=to_seconds(s.slo.ttft_p99), itl_slo=to_seconds(s.slo.itl_p99), window_s=60.0,
        interval_s=15.0, fix_expected={}, rates={}, restarted={}, first_seen={},
    )  # fmt: skip


def test_a_restart_is_priced_at_the_ttft_the_other_pods_lose_carrying_its_load() -> None:
    est = Estimator(POOLS["h200"].model, Fit())
    costs = []
    for others in (0.5, 2.0, 3.0):
        pods = [pod("p0", 2.0, (30, 100)), *(pod(f"p{i}", others, (30, 100)) for i in (1, 2))]
        costs.append(restart_cost(_run(pods), est, pods[0], 1.0))
    assert costs[0] < 0.5  # calm others meet TTFT with the extra load too
    assert costs[0] < costs[1] < costs[2]  # the nearer the knee, the more their requests miss
    # Projected growth prices the restart at the rate it will meet.
    pods = [pod("p0", 2.0, (30, 100)), *(pod(f"p{i}", 2.0, (30, 100)) for i in (1, 2))]
    assert restart_cost(_run(pods), est, pods[0], 1.3) > costs[1]
    # With no other Ready pod there is nothing to price: the gate holds that restart (RestartNeedsCapacity).
    assert restart_cost(_run(pods[:1]), est, pods[0], 1.0) == 0.0


def test_no_restart_defends_an_itl_that_has_not_broken() -> None:
    s = spec()
    near = pod("p0", 10.0, (90, 50), itl_p99=to_seconds(s.slo.itl_p99) * (1.0 - MEASURED_MARGIN / 2))
    standby = plan(s, observe([near]), known(), CURRENT, POOLS)
    assert [d.reason for d in standby.decisions if d.action == "SplitChange"] == ["ITLAtRisk"]
    restarting = plan(s, observe([near, pod("p1", 1.0, (90, 50))]), known(), {"h200": 2, "ascend": 0}, RESTART)
    assert "ITLAtRisk" not in [d.reason for d in restarting.decisions]
    assert not [c for c in restarting.splits if c.pod == "p0"]


def test_a_restart_to_fix_a_missed_ttft_must_pay_for_itself_unless_the_pool_is_calm() -> None:
    s = spec(semiPD__minDecodePercent=100, slo__ttftP99="600ms")
    slo = to_seconds(s.slo.ttft_p99)

    def changes(ttft: float, others: float, pools: dict) -> list[tuple[str | None, str]]:  # type: ignore[type-arg]
        # p0 misses TTFT at a light load (long prompts): a larger prefill share fixes it.
        pods = [pod("p0", 0.5, (30, 100), ttft_p99=ttft), pod("p1", others, (30, 100)), pod("p2", others, (30, 100))]
        p = plan(s, observe(pods), known(), THREE, pools)
        return [(d.pod, d.reason) for d in p.decisions if d.action == "SplitChange" and d.pod == "p0"]

    # Just over the SLO the fix gains about one request over its hold time, less than the restart costs.
    # With the two others calm (they would lose no request's TTFT carrying p0's load), a persistent p99
    # miss is fixed anyway; at 3.3 req/s each they would lose some, and the fix must pay for itself.
    assert changes(1.05 * slo, 3.0, RESTART) == [("p0", "TTFTOverSLO")]
    assert changes(1.05 * slo, 3.3, RESTART) == []
    # A standby swap (the pod keeps serving) makes it either way.
    assert changes(1.05 * slo, 3.3, POOLS) == [("p0", "TTFTOverSLO")]


def test_a_calm_restart_must_be_predicted_to_clear_the_miss_with_the_margin() -> None:
    slo = 2.0
    calm = CALM_RESTART_LOSS / 2
    assert restart_fixes_ttft(1.0, 10.0, calm, 0.85 * slo, slo)  # calm, and cleared with the margin
    assert restart_fixes_ttft(1.0, 10.0, calm, (1.0 - CAPACITY_MARGIN) * slo, slo)  # the margin's edge
    assert not restart_fixes_ttft(1.0, 10.0, calm, 0.95 * slo, slo)  # a 15 % cut that leaves it near the SLO
    assert not restart_fixes_ttft(1.0, 10.0, 2 * CALM_RESTART_LOSS, 0.5 * slo, slo)  # the others would lose
    assert restart_fixes_ttft(11.0, 10.0, 2 * CALM_RESTART_LOSS, 0.95 * slo, slo)  # it pays for itself


def test_an_itl_fix_never_saturates_prefill_and_in_restart_mode_never_costs_ttft() -> None:
    est = Estimator(POOLS["h200"].model, Fit())
    current, weak, near = (100, 50), (30, 80), (100, 70)
    rate = (est.saturation_rate(*weak) + est.saturation_rate(*current)) / 2  # saturates (30, 80) only
    worst = est.ttft(*current, rate)  # today's p99, over an SLO below it
    assert est.ttft(*near, rate) > worst  # more decode share costs TTFT under contention
    for restart in (False, True):
        assert not itl_fix_allowed(est, current, rate, worst, restart, weak)
    assert itl_fix_allowed(est, current, rate, worst, False, near)
    assert not itl_fix_allowed(est, current, rate, worst, True, near)
    assert itl_fix_allowed(est, current, rate, est.ttft(*near, rate), True, near)
    # A pod whose prefill saturates already may move to a split that saturates too, but not to less prefill
    # capacity than it has.
    over = est.saturation_rate(*current) * 1.1
    assert not itl_fix_allowed(est, current, over, est.ttft(*weak, over), False, weak)
    assert itl_fix_allowed(est, current, over, est.ttft(*current, over), True, current)  # its own capacity
    assert est.saturation_rate(90, 40) >= est.saturation_rate(*current)
    assert itl_fix_allowed(est, current, over, est.ttft(*weak, over), False, (90, 40))


def test_a_restart_waits_for_a_steady_load() -> None:
    s = spec(semiPD__minDecodePercent=100, slo__ttftP99="600ms")
    slo = to_seconds(s.slo.ttft_p99)

    def p0_decisions(first_rate: float) -> dict[str, str]:
        # p0 misses TTFT; the others are calm. The evaluation before saw the pool at `first_rate` per pod.
        def pods(others: float) -> list:  # type: ignore[type-arg]
            return [pod("p0", 0.5, (30, 100), ttft_p99=3 * slo), *(pod(f"p{i}", others, (30, 100)) for i in (1, 2))]

        first = plan(s, observe(pods(first_rate), t=985.0), known(), THREE, RESTART)
        state = replace(first.state, last_split_change={}, restarted={}, canary={})
        p = plan(s, observe(pods(1.0), t=1000.0), state, THREE, RESTART)
        return {d.action: d.reason for d in p.decisions if d.pod == "p0" and d.action in ("SplitChange", "SplitHeld")}

    assert p0_decisions(1.0) == {"SplitChange": "TTFTOverSLO"}
    assert p0_decisions(0.2) == {"SplitHeld": "RestartAwaitsSteadyLoad"}


def test_a_pod_breaking_itl_is_not_moved_to_a_split_that_saturates_its_prefill() -> None:
    s = spec(semiPD__maxPrefillPercent=100)
    slo = to_seconds(s.slo.itl_p99)
    saturation = Estimator(POOLS["h200"].model, Fit()).saturation_rate(100, 50)
    busy = []
    for load in (0.5, 0.6, 0.7, 0.8, 0.9):
        # The pod and its node pool break ITL at (100, 50) with prefill busy, but not saturated.
        broken = pod("p0", saturation * load, (100, 50), itl_p99=1.6 * slo)
        p = plan(s, observe([broken], h200={"itl_p99": 1.6 * slo}), known(), CURRENT, POOLS)
        busy += [float(d.details["prefillBusy"]) for d in p.decisions if d.action == "SplitChange"]
    assert busy  # it still moves where a split lowers ITL with prefill to spare (it used to take (30, 80-90))
    assert max(busy) < 1.0
    # A pod off the spec's grid (prefill above the bound) has no current split among the fallbacks, and
    # near saturation every split on the grid costs it TTFT: it takes the least harm, the most prefill
    # the grid allows (the least predicted ITL had taken it to (20, 100), which saturates at a quarter
    # of the rate).
    capped = spec(semiPD__maxPrefillPercent=80)
    broken = pod("p0", saturation * 0.95, (100, 50), itl_p99=1.6 * slo)
    p = plan(capped, observe([broken], h200={"itl_p99": 1.6 * slo}), known(), CURRENT, POOLS)
    assert [(c.prefill_percent, c.decode_percent) for c in p.splits] == [(80, 50)]
