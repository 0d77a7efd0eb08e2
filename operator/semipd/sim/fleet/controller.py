"""The contract between the fleet simulator and whatever controls the fleet.

A controller is called every `interval_s` of simulated time with a read-only `FleetView` and
returns actions (split changes, replica counts). The simulator applies them the way the operator
would: split changes through the pod's switch (standby swap or restart), replica counts through
pod creation (start-up delay, node-pool room) and deletion (drain, then release).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from semipd.policy.state import Decision
from semipd.sim.fleet.instance import Instance
from semipd.sim.fleet.metrics import ScrapeSeries
from semipd.sim.fleet.requests import SimRequest


@dataclass(frozen=True)
class SetSplit:
    instance: str
    prefill_percent: int
    decode_percent: int
    reason: str = ""


@dataclass(frozen=True)
class SetReplicas:
    pool: str
    replicas: int
    reason: str = ""


Action = SetSplit | SetReplicas


Note = Decision
"""A decision worth reporting that is not itself an action: the policy's own `Decision` record, so
the operator's decisions and every baseline's notes read the same (time, action, reason, node pool,
pod, message, details)."""


class PoolView(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def desired(self) -> int: ...

    @property
    def min_replicas(self) -> int: ...

    @property
    def max_replicas(self) -> int: ...

    @property
    def role(self) -> str: ...

    @property
    def accelerators_per_replica(self) -> int: ...

    def members(self) -> Sequence[Instance]:
        """Pods that exist and are not being deleted (pending, starting, ready, restarting)."""
        ...

    def ready(self) -> Sequence[Instance]: ...

    def unschedulable(self) -> tuple[int, float | None]:
        """(pods waiting for room, since when the oldest waits)."""
        ...


class FleetView(Protocol):
    @property
    def now(self) -> float: ...

    @property
    def scrape_s(self) -> float: ...

    def pools(self) -> Mapping[str, PoolView]: ...

    def series(self, instance: Instance) -> ScrapeSeries: ...

    def arrivals_between(self, t0: float, t1: float) -> int:
        """Requests that arrived at the router in (t0, t1]."""
        ...

    def finished_between(self, t0: float, t1: float) -> Sequence[SimRequest]:
        """Requests that finished in (t0, t1], in finish order."""
        ...


class Controller(Protocol):
    """Called every interval_s; returns the actions to apply now."""

    @property
    def name(self) -> str: ...

    @property
    def interval_s(self) -> float: ...

    def control(self, view: FleetView) -> Sequence[Action]: ...

    def notes(self) -> Sequence[Note]:
        """Decisions taken so far, for reports (may be empty)."""
        ...


class StaticController:
    """Changes nothing: static splits, static P:D ratios, fixed replica counts."""

    def __init__(self, name: str, interval_s: float = 60.0) -> None:
        self._name = name
        self._interval = interval_s

    @property
    def name(self) -> str:
        return self._name

    @property
    def interval_s(self) -> float:
        return self._interval

    def control(self, view: FleetView) -> Sequence[Action]:
        return ()

    def notes(self) -> Sequence[Note]:
        return ()
