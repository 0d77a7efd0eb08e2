"""metav1.Time rendering and parsing (status timestamps, pod condition times)."""

from __future__ import annotations

import pytest

from semipd.api.timestamps import epoch_of, rfc3339


def test_metav1_time_round_trips_at_whole_seconds() -> None:
    assert rfc3339(1_800_000_000.7) == "2027-01-15T08:00:00Z"
    assert epoch_of("2027-01-15T08:00:00Z") == 1_800_000_000.0


@pytest.mark.parametrize(
    ("text", "epoch"),
    [
        ("2027-01-15T08:00:00.250Z", 1_800_000_000.25),  # MicroTime-style fractions
        ("2027-01-15T09:00:00+01:00", 1_800_000_000.0),  # another zone
    ],
)
def test_other_rfc3339_forms_with_a_zone_parse(text: str, epoch: float) -> None:
    assert epoch_of(text) == pytest.approx(epoch, abs=1e-6)


@pytest.mark.parametrize("text", [None, "", "yesterday", "2027-01-15T08:00:00"])
def test_absent_malformed_or_zoneless_times_are_none(text: str | None) -> None:
    # A time without a zone would be read in the machine's local zone: not trusted.
    assert epoch_of(text) is None
