"""Restart mode's gates and price (policy.split_gates, and how policy.splits uses them): a restart waits
until the other pods carry its load at no more than RESTART_UTILIZATION of their capacity, it is priced
at what those pods lose carrying it, and it is never a defence of an ITL that has not broken."""

from __future__ import annotations

from dataclasses import replace

from semipd.api.durations import to_seconds
from semipd.perf import contended_shares
from semipd.policy.context import Run
from semipd.policy.planner import plan
from semipd.policy.split_gates import RESTART_UTILIZATION, restart_cost
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
