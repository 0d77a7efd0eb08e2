from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from semipd.api.durations import format_seconds, to_seconds


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("80ms", 0.08), ("2s", 2.0), ("1m30s", 90.0), ("1h", 3600.0), ("1.5s", 1.5), ("250us", 0.00025), ("0s", 0.0)],
)
def test_parses_go_durations(text: str, seconds: float) -> None:
    assert math.isclose(to_seconds(text), seconds)


@pytest.mark.parametrize("text", ["", "2", "2 s", "-1s", "s", "2sec", "1.s", "1d"])
def test_rejects_non_durations(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        to_seconds(text)


@given(st.integers(min_value=0, max_value=10_000))
def test_milliseconds_round_trip(ms: int) -> None:
    assert math.isclose(to_seconds(f"{ms}ms"), ms / 1000)


def test_formats_for_columns() -> None:
    assert format_seconds(0.045) == "45ms"
    assert format_seconds(1.2) == "1.20s"
    assert format_seconds(125) == "2m5s"
    assert format_seconds(float("nan")) == "unknown"
