"""Leader election's decision core: who may hold the Lease, and what each candidate writes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from semipd.controller.lease import LeaseRecord, claim, expired, released

T0 = datetime(2026, 12, 4, tzinfo=UTC)


def test_the_first_candidate_creates_the_lease() -> None:
    assert claim(None, "a", T0, 15) == LeaseRecord("a", 15, T0, T0, 0)


def test_the_holder_renews_and_keeps_its_acquire_time() -> None:
    held = LeaseRecord("a", 15, T0, T0, 3)
    later = T0 + timedelta(seconds=5)
    assert claim(held, "a", later, 15) == LeaseRecord("a", 15, T0, later, 3)


def test_a_standby_waits_until_it_has_seen_no_renewal_for_the_lease_duration() -> None:
    held = LeaseRecord("a", 15, T0, T0, 3)
    assert claim(held, "b", T0, 15, unchanged_for_s=14.9) is None
    taken = claim(held, "b", T0 + timedelta(seconds=16), 15, unchanged_for_s=15.1)
    assert taken == LeaseRecord("b", 15, T0 + timedelta(seconds=16), T0 + timedelta(seconds=16), 4)


def test_the_writers_clock_does_not_decide_expiry() -> None:
    # The holder's renewTime is an hour behind this node's clock, yet it renewed a second ago as seen here.
    skewed = LeaseRecord("a", 15, T0, T0 - timedelta(hours=1), 0)
    assert claim(skewed, "b", T0, 15, unchanged_for_s=1.0) is None


def test_a_released_lease_is_taken_at_once_and_only_the_holder_releases() -> None:
    held = LeaseRecord("a", 15, T0, T0, 2)
    free = released(held, "a")
    assert free is not None
    assert free.holder is None
    assert expired(free, 0.0)
    assert claim(free, "b", T0, 15, unchanged_for_s=0.0) == LeaseRecord("b", 15, T0, T0, 3)
    assert released(held, "b") is None


@given(
    holder=st.sampled_from(["a", "b", None]),
    seen=st.floats(min_value=0, max_value=100),
    duration=st.integers(min_value=1, max_value=60),
)
def test_at_most_one_candidate_may_write_a_live_lease(holder: str | None, seen: float, duration: int) -> None:
    record = LeaseRecord(holder, duration, T0, T0, 0)
    winners = [c for c in ("a", "b", "c") if claim(record, c, T0, duration, seen) is not None]
    if holder and seen <= duration:
        assert winners == [holder]
    else:
        assert winners == ["a", "b", "c"]  # expired or free: all may try; the resourceVersion picks one
