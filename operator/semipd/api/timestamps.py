"""Timestamps as metav1.Time renders them (RFC 3339, seconds, Z), to and from epoch seconds."""

from __future__ import annotations

import time
from datetime import datetime

FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def rfc3339(epoch: float) -> str:
    return time.strftime(FORMAT, time.gmtime(epoch))


def epoch_of(text: str | None) -> float | None:
    """Epoch seconds of a metav1.Time string (or another ISO 8601 time with a zone, as
    datetime.fromisoformat reads it: fractions, offsets); None when absent, not one, or zoneless."""
    try:
        parsed = datetime.fromisoformat(text or "")
    except ValueError:
        return None
    return parsed.timestamp() if parsed.tzinfo is not None else None
