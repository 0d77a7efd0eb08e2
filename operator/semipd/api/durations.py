"""Go-style duration strings (`80ms`, `2s`, `1m30s`) as used throughout the InferencePool API.

Kubernetes users write durations the way Go's `time.ParseDuration` reads them, so the CRD validates
them with a pattern and the operator converts them to seconds with `to_seconds`.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}

DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$"
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ns|us|ms|s|m|h)")
_WHOLE = re.compile(DURATION_PATTERN)


def to_seconds(value: str) -> float:
    """Parse a Go-style duration into seconds; raises ValueError on anything else."""
    if not _WHOLE.match(value):
        raise ValueError(f"{value!r} is not a duration like '80ms', '2s' or '1m30s'")
    return sum(float(num) * _UNIT_SECONDS[unit] for num, unit in _PART.findall(value))


def format_seconds(seconds: float) -> str:
    """Render seconds compactly for status and printer columns (`45ms`, `1.20s`, `2m5s`)."""
    if seconds != seconds:  # NaN has no duration
        return "unknown"
    if seconds < 1.0:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60.0:
        return f"{seconds:.2f}s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest}s" if rest else f"{minutes}m"


def _check(value: str) -> str:
    to_seconds(value)
    return value


Duration = Annotated[
    str,
    Field(pattern=DURATION_PATTERN, max_length=32),
    AfterValidator(_check),
]
"""A duration string validated by the same pattern in Python and in the CRD."""
