"""The split planner's ITL defences and how fast the pool converges: ITLAtRisk, FollowMeasured and the
coupling probe (policy.splits), with the evidence they read and write (policy.evidence)."""

from __future__ import annotations

from dataclasses import replace

from semipd.api.durations import to_seconds
from semipd.engines.sglang import ITL_BUCKETS as SGLANG_ITL_BUCKETS
from semipd.engines.vllm import ITL_BUCKETS as VLLM_ITL_BUCKETS
from semipd.perf import contended_shares
from semipd.policy.context import PoolContext
from semipd.policy.evidence import CLEAN_RATE_REACH, ItlReading, decode_share, verdicts
from semipd.policy.planner import plan
from semipd.policy.splits import (
    AT_RISK_POOL_FRACTION,
    AT_RISK_STEPS,
    CANARY_FREE_ITL,
    CANARY_GAIN,
    ITL_MARGIN,
    MEASURED_MARGIN,
    RATE_MARGIN,
)
from semipd.policy.state import ControllerState, Plan, Prediction
from tests.policy.test_planner import CURRENT, H200, POOLS, Estimator, Fit, _LongAgo, known, observe, pod, spec


def moves(p: Plan) -> dict[str, tuple[str, dict[str, str]]]:
    return {d.pod or "": (d.reason, dict(d.details)) for d in p.decisions if d.action == "SplitChange"}


# --------------------------------------------------------------------------- ITLAtRisk


def test_a_pod_near_the_itl_slo_gets_more_decode_before_it_breaks() -> None:
    s = spec()
    slo = to_seconds(s.slo.itl_p99)
    near = pod("p0", 10.0, (90, 50), itl_p99=slo * (1.0 - MEASURED_MARGIN / 2))  # within the margin, not over
    p = plan(s, observe([near]), known(), CURRENT, POOLS)
    ((reason, details),) = moves(p).values()
    assert reason == "ITLAtRisk"
    (change,) = p.splits
    # The fewest grid steps more decode (at most AT_RISK_STEPS) that reach the cap: the reading is a
    # coarse bucket's interpolation. Never less prefill (the prior's coupling is the least known part).
    step = s.semi_pd.step_percent
    assert 50 < change.decode_percent <= 50 + AT_RISK_STEPS * step
    assert change.prefill_percent >= 90
    assert float(details["predictedITL"]) <= slo * (1.0 - ITL_MARGIN)
    assert float(details["predictedITL"]) < float(details["predictedITLBefore"])
    assert float(details["predictedITLBefore"]) > slo * (1.0 - ITL_MARGIN)
    # The window that ran tight is remembered: the share is refused at that rate, not below it.
    (reading,) = [r for r in p.state.itl_evidence["h200"] if r.tight]
    assert (reading.decode_percent, reading.rate, reading.clean) == (50, 10.0, False)


def test_the_margin_line_moves_to_the_slo_only_inside_a_bucket_too_wide_to_resolve_it() -> None:
    sglang = PoolContext(H200, True, 1.0, itl_buckets=SGLANG_ITL_BUCKETS)
    vllm = PoolContext(H200, True, 1.0, itl_buckets=VLLM_ITL_BUCKETS)
    unknown = PoolContext(H200, True, 1.0)
    # SGLang's 40-50 ms bucket resolves a 45 ms line for a 50 ms SLO; vLLM's 25-50 ms does not.
    assert sglang.margin_line(0.05, MEASURED_MARGIN) == 0.05 * (1.0 - MEASURED_MARGIN)
    assert vllm.margin_line(0.05, MEASURED_MARGIN) == 0.05
    assert unknown.margin_line(0.05, MEASURED_MARGIN) == 0.05 * (1.0 - MEASURED_MARGIN)
    # 60 ms: both read the 54 ms line inside 50-75 ms, whose lower edge is within twice the margin.
    assert sglang.margin_line(0.06, MEASURED_MARGIN) == vllm.margin_line(0.06, MEASURED_MARGIN) == 0.06 * 0.9
    # 80 ms: the 72 ms line's bucket (50-75 ms) ends below the SLO: a reading past 75 ms is past the line
    # wherever the interpolation puts it, so the line stays.
    assert sglang.margin_line(0.08, MEASURED_MARGIN) == 0.08 * (1.0 - MEASURED_MARGIN)


def test_a_reading_inside_a_bucket_that_cannot_resolve_the_margin_is_not_defended() -> None:
    s = spec(slo__itlP99="50ms")
    near = pod("p0", 10.0, (90, 50), itl_p99=0.048)  # within the 45 ms line's margin, under the SLO

    def planned(buckets: tuple[float, ...]) -> Plan:
        pools = {**POOLS, "h200": replace(POOLS["h200"], itl_buckets=buckets)}
        return plan(s, observe([near]), known(), CURRENT, pools)

    fine, coarse = planned(SGLANG_ITL_BUCKETS), planned(VLLM_ITL_BUCKETS)
    assert [reason for reason, _ in moves(fine).values()] == ["ITLAtRisk"]
    assert [r.tight for r in fine.state.itl_evidence["h200"]] == [True]
    # vLLM's 25-50 ms bucket: 48 ms is where the interpolation put the p99, not how near the SLO it is.
    assert "ITLAtRisk" not in [reason for reason, _ in moves(coarse).values()]
    assert [r.clean for r in coarse.state.itl_evidence["h200"]] == [True]


def test_the_defence_jumps_two_steps_only_while_half_the_node_pool_reads_itl_tight() -> None:
    # One pod of four within the margin (its peers clean): one grid step; two of four: up to two steps.
    s = spec()
    slo = to_seconds(s.slo.itl_p99)
    step = s.semi_pd.step_percent

    def defended(tight: int) -> set[int]:
        pods = [pod(f"p{i}", 10.0, (90, 50), itl_p99=slo * (0.95 if i < tight else 0.895)) for i in range(4)]
        p = plan(s, observe(pods), known(), CURRENT, POOLS)
        assert {r for r, _ in moves(p).values()} == {"ITLAtRisk"}
        return {c.decode_percent for c in p.splits}

    assert AT_RISK_POOL_FRACTION == 0.5
    assert defended(1) == {50 + step}
    assert defended(2) == {50 + AT_RISK_STEPS * step}


def test_no_itl_defence_that_gives_up_most_of_the_ttft_attainment() -> None:
    # A pod saturated at prefill 90 %: any decode share taken from prefill costs TTFT it cannot spare.
    s = spec()
    slo = to_seconds(s.slo.itl_p99)
    near = pod("p0", 30.0, (90, 50), itl_p99=slo * (1.0 - MEASURED_MARGIN / 2), ttft_p99=30.0, queued=100.0)
    p = plan(s, observe([near]), known(), CURRENT, POOLS)
    assert "ITLAtRisk" not in {r for r, _ in moves(p).values()}


def test_a_pod_with_room_or_already_over_the_slo_is_not_at_risk() -> None:
    s = spec()
    slo = to_seconds(s.slo.itl_p99)
    calm = pod("p0", 10.0, (90, 50), itl_p99=slo * 0.5)
    over = pod("p1", 10.0, (90, 50), itl_p99=slo * 1.2)
    reasons = {k: r for k, (r, _) in moves(plan(s, observe([calm, over]), known(), CURRENT, POOLS)).items()}
    assert reasons.get("p0") != "ITLAtRisk"
    assert reasons["p1"] == "ITLOverSLO"


def test_one_pod_over_the_slo_is_at_risk_not_broken_while_its_node_pool_has_room() -> None:
    s = spec()
    slo = to_seconds(s.slo.itl_p99)
    over = pod("p0", 10.0, (90, 50), itl_p99=slo * 1.05)
    roomy = {"h200": {"itl_p99": slo * (1.0 - MEASURED_MARGIN) * 0.95}}
    p = plan(s, observe([over], **roomy), known(), CURRENT, POOLS)
    assert {r for r, _ in moves(p).values()} == {"ITLAtRisk"}
    (change,) = p.splits
    assert change.decode_percent > 50  # the direct lever only
    assert change.prefill_percent >= 90
    # With the node pool's p99 within the margin of the SLO too, it is a breach.
    for pool_itl in (slo * (1.0 - MEASURED_MARGIN / 2), None):
        p = plan(s, observe([over], h200={"itl_p99": pool_itl}), known(), CURRENT, POOLS)
        assert {r for r, _ in moves(p).values()} == {"ITLOverSLO"}


def test_a_tight_reading_refuses_its_share_at_its_rate_and_a_breach_down_to_half() -> None:
    tight = (ItlReading(0.0, decode_share((100, 40)), 3.0, 40, clean=False, tight=True),)
    broke = (ItlReading(0.0, decode_share((100, 40)), 3.0, 40, clean=False),)
    assert verdicts(tight, 3.0, (100, 50), 10, now=0.0, window_s=60.0).refusal((100, 40), 3.0) == "broken"
    assert verdicts(tight, 2.9, (100, 50), 10, now=0.0, window_s=60.0).refusal((100, 40), 2.9) == ""
    assert verdicts(broke, 1.5, (100, 50), 10, now=0.0, window_s=60.0).refusal((100, 40), 1.5) == "broken"


# --------------------------------------------------------------------------- FollowMeasured


def _after_canary(rate: float, split: tuple[int, int] = (90, 40)) -> ControllerState:
    """Another pod's settled window met ITL at `split`, at `rate`."""
    clean = ItlReading(990.0, decode_share(split), rate, split[1], clean=True)
    return replace(known(), itl_evidence={"h200": (clean,)}, first_seen=_LongAgo())


def test_the_pool_follows_a_canary_that_met_itl_without_a_predicted_gain() -> None:
    s = spec()
    calm = pod("p1", 10.0, (90, 50))
    p = plan(s, observe([calm]), _after_canary(10.0), CURRENT, POOLS)
    ((reason, details),) = moves(p).values()
    assert reason == "FollowMeasured"
    assert p.splits[0].decode_percent == 40
    assert float(details["predictedAttainment"]) >= float(details["attainmentBefore"])
    # Without the canary's window, decode 40 is unmeasured: no pod follows anything.
    alone = moves(plan(s, observe([calm]), known(), CURRENT, POOLS))
    assert "FollowMeasured" not in {r for r, _ in alone.values()}


def test_no_follow_in_restart_mode() -> None:
    restart = {**POOLS, "h200": replace(POOLS["h200"], restart=True, split_cost_s=H200.restart_cost())}
    p = plan(spec(), observe([pod("p1", 10.0, (90, 50))]), _after_canary(10.0), CURRENT, restart)
    assert "FollowMeasured" not in {r for r, _ in moves(p).values()}


def test_a_clean_reading_vouches_for_a_quarter_more_rate_than_it_saw() -> None:
    clean = (ItlReading(0.0, decode_share((90, 40)), 2.0, 40, clean=True),)
    assert verdicts(clean, 2.0 * CLEAN_RATE_REACH, (100, 50), 10, now=0.0, window_s=60.0).lowest_decode == 40
    assert verdicts(clean, 2.0 * CLEAN_RATE_REACH + 0.01, (100, 50), 10, now=0.0, window_s=60.0).lowest_decode == 50


# --------------------------------------------------------------------------- coupling probe


def _probe_case(margin: float, itl_fraction: float = 0.7) -> tuple[Plan, float]:
    """A pod at (80, 40) missing TTFT whose best move, (90, 40), the prior predicts at `margin` x the SLO
    at the projected rate. No decode batch is reported, so the prior is not rescaled by the pod's ITL."""
    rate = 15.0
    predicted = Estimator(H200, Fit()).itl(90, 40, rate * (1.0 + RATE_MARGIN))
    slo = predicted / margin
    s = spec(slo__itlP99=f"{slo * 1000:.3f}ms")
    p0 = pod("p0", rate, (80, 40), ttft_p99=1.5, running=None, itl_p99=slo * itl_fraction)
    return plan(s, observe([p0]), known(), CURRENT, POOLS), slo


def test_a_canary_may_spend_the_itl_margin_on_more_prefill_at_a_measured_decode_share() -> None:
    p, slo = _probe_case(0.95)
    ((reason, details),) = moves(p).values()
    assert (p.splits[0].prefill_percent, p.splits[0].decode_percent) == (90, 40)
    assert details["itlProbe"] == "true"
    assert slo * (1.0 - ITL_MARGIN) < float(details["predictedITL"]) <= slo
    assert reason == "TTFTOverSLO"
    assert p.state.canary.get("h200") == 1000.0  # one pod per node pool at a time


def test_no_probe_past_the_slo_or_with_a_measured_itl_near_it() -> None:
    past, _ = _probe_case(1.02)
    assert all(details["itlProbe"] == "false" for _, details in moves(past).values())
    assert all((c.prefill_percent, c.decode_percent) != (90, 40) for c in past.splits)
    tight, _ = _probe_case(0.95, itl_fraction=0.95)
    assert all(details["itlProbe"] == "false" for _, details in moves(tight).values())


def _calm_case(state: ControllerState, split: tuple[int, int] = (80, 40), restart: bool = False) -> tuple[Plan, float]:
    """A pod meeting TTFT with ITL room at `split`; the prior predicts (90, 40) at 0.95 x the SLO."""
    rate = 15.0
    slo = Estimator(H200, Fit()).itl(90, 40, rate * (1.0 + RATE_MARGIN)) / 0.95
    s = spec(slo__itlP99=f"{slo * 1000:.3f}ms")
    restarting = replace(POOLS["h200"], restart=True, split_cost_s=H200.restart_cost())
    pools = {**POOLS, "h200": restarting} if restart else POOLS
    p0 = pod("p0", rate, split, ttft_p99=0.05, running=None, itl_p99=slo * 0.7)
    return plan(s, observe([p0]), state, CURRENT, pools), slo


def test_a_calm_pod_probes_the_coupling_without_a_predicted_gain_in_standby_mode_only() -> None:
    p, slo = _calm_case(known())
    ((reason, details),) = moves(p).values()
    assert reason == "CouplingProbe"
    assert details["itlProbe"] == "true"
    assert (p.splits[0].prefill_percent, p.splits[0].decode_percent) == (90, 40)
    assert slo * (1.0 - ITL_MARGIN) < float(details["predictedITL"]) <= slo
    restart, _ = _calm_case(known(), restart=True)
    assert all(details["itlProbe"] == "false" for _, details in moves(restart).values())


def test_the_pool_follows_a_clean_probe_to_more_prefill_at_the_same_decode_share() -> None:
    p, slo = _calm_case(_after_canary(15.0))
    ((reason, details),) = moves(p).values()
    assert reason == "FollowMeasured"
    assert (p.splits[0].prefill_percent, p.splits[0].decode_percent) == (90, 40)
    assert details["itlVouched"] == "true"
    assert details["itlProbe"] == "false"  # measured: no canary, so no pod waits for another's window
    assert slo * (1.0 - ITL_MARGIN) < float(details["predictedITL"]) <= slo
    assert p.state.canary.get("h200") is None


def test_a_clean_probe_never_vouches_for_less_decode_share() -> None:
    # From (80, 50), (90, 40) takes decode share away: only the model with its margin may allow that.
    # Nor is a probe that takes decode share away taken for no gain: only the model with its margin.
    p, slo = _calm_case(_after_canary(15.0), split=(80, 50))
    assert all(details["itlVouched"] == "false" for _, details in moves(p).values())
    assert all(float(details["predictedITL"]) <= slo * (1.0 - ITL_MARGIN) for _, details in moves(p).values())


def test_a_pod_missing_ttft_takes_less_decode_share_a_peer_ran_clean_at_its_rate() -> None:
    # From (80, 50), missing TTFT, (90, 40) is predicted within the margin only; another pod ran it clean
    # at this rate, so the measurement prices it (the prior would pick a canary further down).
    rate = 15.0
    slo = Estimator(H200, Fit()).itl(90, 40, rate * (1.0 + RATE_MARGIN)) / 0.95
    s = spec(slo__itlP99=f"{slo * 1000:.3f}ms")
    missing = pod("p0", rate, (80, 50), ttft_p99=1.5, running=None, itl_p99=slo * 0.7)
    p = plan(s, observe([missing]), _after_canary(rate), CURRENT, POOLS)
    ((reason, details),) = moves(p).values()
    assert reason == "TTFTOverSLO"
    assert (p.splits[0].prefill_percent, p.splits[0].decode_percent) == (90, 40)
    assert details["itlVouched"] == "true"
    assert slo * (1.0 - ITL_MARGIN) < float(details["predictedITL"]) <= slo


# --------------------------------------------------------------------------- canary gate


def test_a_move_predicted_far_under_the_itl_slo_is_no_canary() -> None:
    two = observe([pod("p0", 6.0, (50, 100), ttft_p99=1.2), pod("p1", 6.0, (50, 100), ttft_p99=1.2)])
    # At an ITL SLO near the prediction the first move below the measured decode share goes one pod
    # at a time ...
    tight = plan(spec(slo__itlP99="15ms"), two, known(), CURRENT, POOLS)
    assert len([c for c in tight.splits if c.decode_percent < 100]) == 1
    assert [d.reason for d in tight.decisions if d.action == "SplitHeld"] == ["CanaryInProgress"]
    assert all(float(d["predictedITL"]) > CANARY_FREE_ITL * 0.015 for _, d in moves(tight).values())
    # ... and with an SLO the prediction sits far under, every pod takes it at once.
    loose = plan(spec(), two, known(), CURRENT, POOLS)
    assert {c.pod for c in loose.splits} == {"p0", "p1"}
    assert all(c.decode_percent < 100 for c in loose.splits)
    assert not [d for d in loose.decisions if d.action == "SplitHeld"]
    assert all(float(d["predictedITL"]) <= CANARY_FREE_ITL * 0.060 for _, d in moves(loose).values())


def test_a_ttft_fix_below_the_measured_decode_shares_must_be_worth_what_a_broken_window_costs() -> None:
    # The pod misses TTFT at decode 100 (measured); going below it is a canary whose breach would cost
    # the requests that still meet TTFT, so it needs CANARY_GAIN x the attainment the pod still has.
    s = spec(semiPD__maxPrefillPercent=100, slo__itlP99="15ms")
    for rate, canary in ((3.0, False), (6.0, True)):
        p = plan(s, observe([pod("p0", rate, (50, 100), ttft_p99=1.05)]), known(), CURRENT, POOLS)
        (c,) = p.splits
        (d,) = [d for d in p.decisions if d.action == "SplitChange"]
        assert d.reason == "TTFTOverSLO"
        before, after = float(d.details["attainmentBefore"]), float(d.details["predictedAttainment"])
        if canary:  # more of the window is lost already: +28 points at 72 %
            assert c.decode_percent < 100
            assert after - before >= CANARY_GAIN * before
        else:  # a canary would gain under 3 points at 97 %: more prefill at the measured decode share instead
            assert (c.prefill_percent, c.decode_percent) == (100, 100)
            assert after > before


def _moved(recent_itl: float | None, split: tuple[int, int] = (90, 30), previous: tuple[int, int] = (90, 50),
           restart: bool = False) -> Plan:  # fmt: skip
    """p0 moved from `previous` to `split` 40 s ago (the recent window, 30 s, holds only the new split)."""
    s = spec(semiPD__minDecodePercent=10)
    moved_at = 960.0
    pred = Prediction(moved_at, split[0], split[1], 0.5, 0.05, 2.0, previous)
    state = replace(known(), last_split_change={"p0": moved_at}, predictions={"p0": pred})
    p0 = pod("p0", 2.0, split, itl_p99_recent=recent_itl)
    obs = replace(observe([p0, pod("p1", 2.0, previous)]), recent_window_s=30.0)
    pools = {**POOLS, "h200": PoolContext(H200, True, H200.switch_cost(), restart=restart)}
    return plan(s, obs, state, {"h200": 2, "ascend": 0}, pools)


def test_a_move_that_broke_itl_in_the_recent_window_goes_back_at_once() -> None:
    # Still inside its settling window (no settled verdict yet), but the recent window is over the SLO
    # (60 ms) since decode came down: back to where it was, recorded as broken at this rate.
    p = _moved(0.08)
    (back,) = [c for c in p.splits if c.pod == "p0"]
    assert (back.prefill_percent, back.decode_percent) == (90, 50)
    (d,) = [d for d in p.decisions if d.action == "SplitChange" and d.pod == "p0"]
    assert d.reason == "ITLBrokeAfterMove"
    assert "p0" not in p.state.predictions
    broken = [r for r in p.state.itl_evidence["h200"] if not r.clean]
    assert [(r.share, r.decode_percent) for r in broken] == [(decode_share((90, 30)), 30)]


def test_a_move_is_not_undone_without_a_recent_breach_that_it_could_have_caused() -> None:
    assert not [c for c in _moved(0.05).splits if c.pod == "p0"]  # recent ITL under the SLO
    assert not [c for c in _moved(None).splits if c.pod == "p0"]  # no recent reading
    # Decode share came up, not down: the move did not cause the breach.
    assert not [d for d in _moved(0.08, (90, 50), (90, 30)).decisions if d.reason == "ITLBrokeAfterMove"]
    # Restart mode: going back is another restart, which the restart gate must admit (the settled path).
    assert not [d for d in _moved(0.08, restart=True).decisions if d.reason == "ITLBrokeAfterMove"]


# --------------------------------------------------------------------------- no split meets ITL


def test_with_no_split_meeting_itl_the_pod_gives_up_no_more_ttft_than_the_slo_or_today() -> None:
    # ITL 5x the SLO: no split meets it. At light load the least predicted ITL costs TTFT within the SLO.
    slo = to_seconds(spec().slo.ttft_p99)
    light = plan(spec(), observe([pod("p0", 1.0, (50, 100), itl_p99=0.3)]), known(), CURRENT, POOLS)
    ((reason, details),) = moves(light).values()
    assert reason == "ITLOverSLO"
    assert float(details["predictedITL"]) < float(details["predictedITLBefore"])
    assert float(details["predictedTTFT"]) <= slo
    assert [(c.prefill_percent, c.decode_percent) for c in light.splits] == [(20, 100)]
    # At 6 req/s every split with less predicted ITL has a worse TTFT than today's, past the SLO, and
    # (20, 100) cannot keep up at all: the pod stays, rather than lose every request's TTFT as well.
    est = Estimator(POOLS["h200"].model, Fit())
    assert contended_shares(0.2, 1.0)[0] < 6.0 * (1.0 + RATE_MARGIN) * est.l100()
    loaded = plan(spec(), observe([pod("p0", 6.0, (50, 100), itl_p99=0.3)]), known(), CURRENT, POOLS)
    assert moves(loaded) == {}
    assert loaded.splits == ()
