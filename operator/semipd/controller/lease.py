"""Leader election's decision core: given the Lease as read, may this process hold it, and what does
it write? Pure (no clock, no API): `leader.py` reads, writes with the read resourceVersion (so two
candidates never both win), and acts on the answer.

The rules are client-go's leaderelection: a holder renews within the lease duration; anyone may take
a lease that nobody holds, or whose record has not changed for its leaseDurationSeconds *as this
candidate observed it* (its own monotonic clock, so clock skew between nodes cannot hand the lease
to two processes); a takeover bumps leaseTransitions.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime


@dataclass(frozen=True)
class LeaseRecord:
    """The fields of a coordination.k8s.io/v1 Lease's spec that election reads and writes."""

    holder: str | None
    duration_s: int
    acquired: datetime | None = None
    renewed: datetime | None = None
    transitions: int = 0


def expired(record: LeaseRecord, unchanged_for_s: float) -> bool:
    """Nobody holds it, or the record has not changed (no renewal seen) for the lease duration."""
    return not record.holder or unchanged_for_s > record.duration_s


def claim(record: LeaseRecord | None, identity: str, now: datetime, duration_s: int,
          unchanged_for_s: float = 0.0) -> LeaseRecord | None:  # fmt: skip
    """The record to write so that `identity` holds the lease from `now` (the times written); None
    while another holder's lease is live (wait and read again). `unchanged_for_s`: how long this
    candidate has seen exactly this record."""
    if record is None:
        return LeaseRecord(identity, duration_s, now, now, 0)
    if record.holder == identity:
        return replace(record, duration_s=duration_s, renewed=now)
    if not expired(record, unchanged_for_s):
        return None
    return LeaseRecord(identity, duration_s, now, now, record.transitions + 1)


def released(record: LeaseRecord, identity: str) -> LeaseRecord | None:
    """The record to write when `identity` steps down (a standby takes over at once, not after the
    lease duration); None when it does not hold the lease."""
    if record.holder != identity:
        return None
    return replace(record, holder=None, renewed=None)
