"""Pure validation of split requests and bounds."""

from __future__ import annotations

import pytest

from semipd.agent.split import Split, SplitBounds, SplitRequestError, parse_split_request

CURRENT = Split(50, 100)
BOUNDS = SplitBounds(10, 90, 50, 100)


def test_full_body() -> None:
    assert parse_split_request(b'{"prefillPercent": 60, "decodePercent": 80}', CURRENT, BOUNDS) == Split(60, 80)


def test_missing_field_keeps_current_value() -> None:
    assert parse_split_request(b'{"decodePercent": 70}', CURRENT, BOUNDS) == Split(50, 70)
    assert parse_split_request(b'{"prefillPercent": 20}', CURRENT, BOUNDS) == Split(20, 100)


@pytest.mark.parametrize("edge", [b'{"prefillPercent": 10}', b'{"prefillPercent": 90}', b'{"decodePercent": 50}'])
def test_bounds_are_inclusive(edge: bytes) -> None:
    parse_split_request(edge, CURRENT, BOUNDS)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"null", "JSON object"),
        (b'"60"', "JSON object"),
        (b"{}", "at least one of prefillPercent, decodePercent"),
        (b'{"prefillPercent": 9}', "prefillPercent 9 is outside 10..90"),
        (b'{"prefillPercent": 91}', "prefillPercent 91 is outside 10..90"),
        (b'{"decodePercent": 49}', "decodePercent 49 is outside 50..100"),
        (b'{"prefillPercent": null}', "must be an integer, got null"),
        (b'{"prefillPercent": false}', "must be an integer, got false"),
        (b'{"decodePercent": 99.5}', "must be an integer, got 99.5"),
        (b'{"prefillPercent": 60, "extra": 1}', "unknown field(s) extra"),
    ],
)
def test_rejections_say_why(body: bytes, message: str) -> None:
    with pytest.raises(SplitRequestError) as err:
        parse_split_request(body, CURRENT, BOUNDS)
    assert message in str(err.value)


def test_both_problems_are_reported_together() -> None:
    with pytest.raises(SplitRequestError) as err:
        parse_split_request(b'{"prefillPercent": 1, "decodePercent": 1}', CURRENT, BOUNDS)
    assert "prefillPercent" in str(err.value)
    assert "decodePercent" in str(err.value)


@pytest.mark.parametrize(
    "bounds", [SplitBounds(0, 100, 1, 100), SplitBounds(1, 101, 1, 100), SplitBounds(60, 50, 1, 100)]
)
def test_bad_configured_bounds_are_reported(bounds: SplitBounds) -> None:
    assert bounds.problems()


def test_default_bounds_are_one_to_hundred() -> None:
    assert SplitBounds().problems() == []
    assert SplitBounds().check(Split(1, 100)) == []
    assert SplitBounds().check(Split(0, 100)) != []
