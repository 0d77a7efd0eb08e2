"""Timestamps as metav1.Time renders them (RFC 3339, seconds, Z), to and from epoch seconds."""

from __future__ import annotations

import calendar
import time

FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def rfc3339(epoch: float) -> str:
    return time.strftime(FORMAT, time.gmtime(epoch))


def epoch_of(text: str | None) -> float | None:
    """Epoch seconds of a metav1.Time string; None when absent or not one."""
    if not text:
        return None
    try:
        return float(calendar.timegm(time.strptime(text, FORMAT)))
    except ValueError:
        return None
