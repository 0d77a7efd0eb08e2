"""The prefill/decode compute split and the pure validation of `PUT /v1/split` bodies.

Percentages are MPS-style shares of the accelerator's compute (1..100 each); their sum may exceed
100 because MPS lets the two processes overlap.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

ABSOLUTE_MIN = 1
ABSOLUTE_MAX = 100
FIELDS = ("prefillPercent", "decodePercent")


class SplitRequestError(ValueError):
    """A split request that is malformed or out of bounds (HTTP 400)."""


@dataclass(frozen=True)
class Split:
    prefill_percent: int
    decode_percent: int

    def to_json(self) -> dict[str, int]:
        return {"prefillPercent": self.prefill_percent, "decodePercent": self.decode_percent}

    def __str__(self) -> str:
        return f"{self.prefill_percent}/{self.decode_percent}"


@dataclass(frozen=True)
class SplitBounds:
    prefill_min: int = ABSOLUTE_MIN
    prefill_max: int = ABSOLUTE_MAX
    decode_min: int = ABSOLUTE_MIN
    decode_max: int = ABSOLUTE_MAX

    def problems(self) -> list[str]:
        found = []
        for phase, low, high in (
            ("prefill", self.prefill_min, self.prefill_max),
            ("decode", self.decode_min, self.decode_max),
        ):
            if not ABSOLUTE_MIN <= low <= high <= ABSOLUTE_MAX:
                found.append(
                    f"{phase} bounds {low}..{high} must satisfy {ABSOLUTE_MIN} <= min <= max <= {ABSOLUTE_MAX}"
                )
        return found

    def check(self, split: Split) -> list[str]:
        found = []
        if not self.prefill_min <= split.prefill_percent <= self.prefill_max:
            found.append(f"prefillPercent {split.prefill_percent} is outside {self.prefill_min}..{self.prefill_max}")
        if not self.decode_min <= split.decode_percent <= self.decode_max:
            found.append(f"decodePercent {split.decode_percent} is outside {self.decode_min}..{self.decode_max}")
        return found


def _percent(doc: dict[str, Any], name: str, default: int) -> int:
    if name not in doc:
        return default
    value = doc[name]
    # bool is an int subclass in Python; true/false must not mean 1/0 percent.
    if isinstance(value, bool) or not isinstance(value, int):
        raise SplitRequestError(f"{name} must be an integer, got {json.dumps(value)}")
    return value


def parse_split_request(body: bytes, current: Split, bounds: SplitBounds) -> Split:
    """The split a request body asks for; a missing field keeps its current value."""
    try:
        doc = json.loads(body.decode("utf-8"))
    except ValueError as e:  # bad UTF-8, bad JSON, or an integer past Python's digit limit
        raise SplitRequestError(f"body is not valid JSON: {e}") from e
    if not isinstance(doc, dict):
        raise SplitRequestError('body must be a JSON object like {"prefillPercent": 60, "decodePercent": 100}')
    unknown = sorted(set(doc) - set(FIELDS))
    if unknown:
        raise SplitRequestError(f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(FIELDS)}")
    if not any(name in doc for name in FIELDS):
        raise SplitRequestError(f"body must set at least one of {', '.join(FIELDS)}")
    target = Split(
        _percent(doc, "prefillPercent", current.prefill_percent),
        _percent(doc, "decodePercent", current.decode_percent),
    )
    problems = bounds.check(target)
    if problems:
        raise SplitRequestError("; ".join(problems))
    return target
