"""ITL evidence: what the split planner may and may not do with what a pool's pods measured."""

from __future__ import annotations

from dataclasses import replace

from semipd.policy.evidence import (
    BROKEN_TTL_WINDOWS,
    CAP_TTL_WINDOWS,
    TTL_WINDOWS,
    ItlReading,
    decode_share,
    updated,
    verdicts,
)
from semipd.policy.planner import plan
from semipd.policy.split_gates import LOST_TTFT
from tests.policy.test_planner import POOLS, known, observe, pod, spec

WINDOW = 60.0


def refusal(readings: tuple[ItlReading, ...], split: tuple[int, int], rate: float = 2.0,
            current: tuple[int, int] = (100, 50)) -> str:  # fmt: skip
    return verdicts(readings, rate, current, 10, now=0.0, window_s=WINDOW).refusal(split, rate)


def explores(readings: tuple[ItlReading, ...], split: tuple[int, int], current: tuple[int, int] = (100, 50)) -> bool:
    return verdicts(readings, 2.0, current, 10, now=0.0, window_s=WINDOW).explores(split)


def lowest(readings: tuple[ItlReading, ...]) -> int:
    return verdicts(readings, 2.0, (100, 50), 10, now=0.0, window_s=WINDOW).lowest_decode


def test_decode_comes_down_one_step_below_what_was_measured() -> None:
    assert refusal((), (100, 40)) == ""
    assert refusal((), (100, 30)) == "untrusted"
    # Another pod measured decode 40 clean at this rate or more: one more step is allowed.
    met = (ItlReading(0.0, decode_share((90, 40)), 3.0, 40, clean=True),)
    assert refusal(met, (100, 30)) == ""
    # Measured at a lower rate than this pod's: it says nothing about this load.
    low = (ItlReading(0.0, decode_share((90, 40)), 1.0, 40, clean=True),)
    assert refusal(low, (100, 30)) == "untrusted"


def test_a_pod_far_below_the_itl_slo_may_come_down_two_steps() -> None:
    roomy = verdicts((), 2.0, (100, 100), 10, now=0.0, window_s=WINDOW, roomy=True)
    assert roomy.refusal((100, 80), 2.0) == ""
    assert roomy.refusal((100, 70), 2.0) == "untrusted"
    assert verdicts((), 2.0, (100, 100), 10, now=0.0, window_s=WINDOW).refusal((100, 80), 2.0) == "untrusted"
    # A breach still refuses, however much room the pod has now.
    broke = (ItlReading(0.0, decode_share((100, 80)), 2.0, 80, clean=False),)
    roomy_broke = verdicts(broke, 2.0, (100, 100), 10, now=0.0, window_s=WINDOW, roomy=True)
    assert roomy_broke.refusal((100, 80), 2.0) == "broken"


def test_a_breach_refuses_its_share_and_less_down_to_half_its_rate() -> None:
    broke = (ItlReading(0.0, decode_share((100, 40)), 4.0, 40, clean=False),)
    assert refusal(broke, (100, 40), rate=2.0) == "broken"
    assert refusal(broke, (90, 40), rate=2.0) == "broken"  # the same cap, just now
    older = (replace(broke[0], time=-(CAP_TTL_WINDOWS + 1) * WINDOW),)
    assert refusal(older, (90, 40), rate=2.0) == ""  # more contended decode share than the breach
    assert refusal(older, (100, 40), rate=2.0) == "broken"
    assert refusal(broke, (100, 40), rate=1.9) == ""  # well below the rate it broke at
    assert refusal(broke, (100, 50), rate=4.0) == ""


def test_a_clean_reading_is_stale_once_a_later_window_ran_tight_with_as_much_decode() -> None:
    clean = ItlReading(0.0, decode_share((100, 40)), 2.0, 40, clean=True)
    assert lowest((clean,)) == 40
    # The mix moved: a later window ran tight with more decode share than the clean one had.
    later = ItlReading(10.0, decode_share((100, 50)), 2.0, 50, clean=False, tight=True)
    assert lowest((clean, later)) == 50
    # ... or one of the same evaluation (another pod's window ran tight beside the clean one).
    same = replace(later, time=0.0)
    assert lowest((clean, same)) == 50
    # An earlier tight window, or a later one with less decode share, says nothing against it.
    assert lowest((replace(later, time=-10.0), clean)) == 40
    less = ItlReading(10.0, decode_share((100, 30)), 2.0, 30, clean=False)
    assert lowest((clean, less)) == 40


def test_a_canary_is_only_a_decode_step_below_what_was_measured() -> None:
    assert explores((), (100, 40))
    assert not explores((), (100, 50))
    # More prefill at the measured decode share is not a canary (TTFT fixes go together).
    assert not explores((), (100, 100), current=(50, 100))
    met = (ItlReading(0.0, decode_share((100, 40)), 2.0, 40, clean=True),)
    assert not explores(met, (100, 40))


def test_a_decode_share_that_just_ran_tight_is_refused_at_any_prefill_share() -> None:
    # Peers ran (100, 60) tight at 2/s: (90, 60) has more contended decode share, so the prior would call
    # it safer, but the cap that just ran tight is refused for CAP_TTL_WINDOWS whatever the prefill share.
    tight = (ItlReading(0.0, decode_share((100, 60)), 2.0, 60, clean=False, tight=True),)
    assert decode_share((90, 60)) > decode_share((100, 60))
    seen = verdicts(tight, 2.0, (100, 70), 10, now=CAP_TTL_WINDOWS * WINDOW, window_s=WINDOW)
    assert seen.refusal((90, 60), 2.0) == "broken"
    assert seen.refusal((90, 50), 2.0) == "broken"
    assert seen.refusal((90, 60), 1.5) == ""  # below the rate it ran tight at
    assert seen.refusal((100, 70), 2.0) == ""
    # A pod at that cap keeps the lever of less prefill share (a pod breaking ITL at decode 100 % has no other).
    at_cap = verdicts(tight, 2.0, (100, 60), 10, now=0.0, window_s=WINDOW)
    assert at_cap.refusal((90, 60), 2.0) == ""
    # Older, only splits with no more contended decode share than it had stay refused.
    old = verdicts(tight, 2.0, (100, 70), 10, now=(CAP_TTL_WINDOWS + 1) * WINDOW, window_s=WINDOW)
    assert old.refusal((90, 60), 2.0) == ""
    assert old.refusal((100, 60), 2.0) == "broken"


def test_breaches_outlive_clean_readings_and_repeats_merge() -> None:
    clean = ItlReading(0.0, 0.3, 2.0, 40, clean=True)
    broke = ItlReading(0.0, 0.25, 2.0, 30, clean=False)
    later = (TTL_WINDOWS + 1) * WINDOW
    assert updated((clean, broke), (), later, WINDOW) == (broke,)
    assert updated((clean, broke), (), (BROKEN_TTL_WINDOWS + 1) * WINDOW, WINDOW) == ()
    # Eight pods' clean windows at one split merge into one reading; the breach is never pushed out.
    many = [replace(clean, time=float(t)) for t in range(1000)]
    kept = updated((broke,), many, 1000.0, WINDOW)
    assert broke in kept
    assert len(kept) == 2


def test_merged_tight_windows_keep_the_lowest_rate_they_refused_from() -> None:
    # Peers read decode 50 tight at 0.44/s, then one more at 0.58/s: a pod coming down from decode 70
    # at 0.577/s must still be refused the cap (the newest window alone would let it through).
    share = decode_share((100, 50))
    first = ItlReading(165.0, share, 0.444, 50, clean=False, tight=True)
    newer = ItlReading(210.0, share, 0.578, 50, clean=False, tight=True)
    kept = updated((first,), (newer,), 210.0, WINDOW)
    assert kept == (replace(newer, rate=0.444),)
    met = ItlReading(210.0, decode_share((100, 60)), 0.733, 60, clean=True)  # decode 50 is one step below
    seen = verdicts((*kept, met), 0.489, (100, 70), 10, now=210.0, window_s=WINDOW)
    assert seen.refusal((90, 50), 0.577) == "broken"
    newest_only = verdicts((newer, met), 0.489, (100, 70), 10, now=210.0, window_s=WINDOW)
    assert newest_only.refusal((90, 50), 0.577) == ""
    # Clean windows still merge per rate (a clean reading vouches only near its own rate).
    clean = ItlReading(180.0, share, 0.5, 50, clean=True)
    assert len(updated((clean,), (replace(clean, time=195.0, rate=0.9),), 195.0, WINDOW)) == 2


def test_plan_records_breaches_and_never_returns_to_the_share_that_broke() -> None:
    # p0 broke ITL at (90, 40); p1, calm at (100, 50), must not try (90, 40) or less decode share now.
    s = spec(semiPD__maxPrefillPercent=100)
    broke = pod("p0", 13.0, (90, 40), itl_p99=0.08)
    calm = pod("p1", 13.0, (100, 50))
    p = plan(s, observe([broke, calm]), known(), {"h200": 2, "ascend": 0}, POOLS)
    readings = p.state.itl_evidence["h200"]
    assert any(not r.clean and r.decode_percent == 40 for r in readings)
    for c in p.splits:
        if c.pod == "p1":
            assert decode_share((c.prefill_percent, c.decode_percent)) > decode_share((90, 40))


def test_one_canary_per_node_pool_at_a_time() -> None:
    # Two pods at decode 100 miss TTFT (most of their requests still meet it); both may take more
    # prefill, only one may take less decode (at an ITL SLO that the move's prediction does not sit far
    # under: CANARY_FREE_ITL).
    s = spec(semiPD__maxPrefillPercent=100, slo__itlP99="15ms")
    pods = [pod("p0", 6.0, (50, 100), ttft_p99=1.2), pod("p1", 6.0, (50, 100), ttft_p99=1.2)]
    p = plan(s, observe(pods), known(), {"h200": 2, "ascend": 0}, POOLS)
    below = [c for c in p.splits if c.decode_percent < 100]
    assert len(below) <= 1
    # The other still gets more prefill at the measured decode share instead of waiting.
    assert len(below) == 1
    assert len(p.splits) == 2
    assert [d.reason for d in p.decisions if d.action == "SplitHeld"] == ["CanaryInProgress"]
    assert p.state.canary.get("h200") == 1000.0


def test_pods_whose_requests_already_miss_ttft_do_not_wait_behind_a_canary() -> None:
    # Saturated at decode 100: nearly every request misses TTFT, so a broken ITL window would cost them
    # little, and each may take less decode share at once (LOST_TTFT).
    s = spec(semiPD__maxPrefillPercent=100, slo__itlP99="15ms")
    pods = [pod("p0", 13.0, (50, 100)), pod("p1", 13.0, (50, 100))]
    p = plan(s, observe(pods), known(), {"h200": 2, "ascend": 0}, POOLS)
    changes = [d for d in p.decisions if d.action == "SplitChange"]
    assert all(float(d.details["attainmentBefore"]) < LOST_TTFT for d in changes)
    assert len([c for c in p.splits if c.decode_percent < 100]) == 2
    assert not [d for d in p.decisions if d.action == "SplitHeld"]
