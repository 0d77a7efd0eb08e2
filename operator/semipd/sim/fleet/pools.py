"""Runtime state of one node pool in the fleet simulator: its members, draining and gone pods,
the replica count it was asked for, and the room its node pool has left."""

from __future__ import annotations

from collections.abc import Sequence

from semipd.sim.fleet.instance import Instance, State
from semipd.sim.fleet.setup import PoolSetup


class PoolState:
    """Runtime state of one node pool (implements controller.PoolView)."""

    def __init__(self, setup: PoolSetup) -> None:
        self.setup = setup
        self.desired = setup.replicas
        self._members: list[Instance] = []
        self.draining: list[Instance] = []
        self.gone: list[Instance] = []
        self.created = 0

    @property
    def name(self) -> str:
        return self.setup.name

    @property
    def min_replicas(self) -> int:
        return self.setup.min_replicas

    @property
    def max_replicas(self) -> int:
        return self.setup.max_replicas

    @property
    def role(self) -> str:
        return self.setup.role

    @property
    def accelerators_per_replica(self) -> int:
        return self.setup.accelerators_per_replica

    def members(self) -> Sequence[Instance]:
        return self._members

    def ready(self) -> list[Instance]:
        return [i for i in self._members if i.state is State.READY]

    def unschedulable(self) -> tuple[int, float | None]:
        pending = [i.created for i in self._members if i.state is State.PENDING]
        return len(pending), (min(pending) if pending else None)

    def holding(self) -> int:
        """Pods holding accelerators (scheduled and not yet gone)."""
        return sum(1 for i in self._members if i.state is not State.PENDING) + len(self.draining)

    def room(self) -> int:
        cap = self.setup.capacity if self.setup.capacity is not None else self.setup.max_replicas
        return cap - self.holding()
