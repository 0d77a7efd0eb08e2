"""Plain Kubernetes HPA on the per-pod waiting queue over fixed-split semi-PD pods (baselines.md §7).

desired = ceil(ready pods x mean queue / target) (the Pods-metric rule), unchanged while
|mean/target - 1| <= 0.1; every 15 s; scale-up unstabilised, at most max(100 %, 4 pods) per
period; scale-down to the highest recommendation of the last 300 s, at most 100 % per period.
The queue is `sglang:num_queue_reqs` at the last scrape. Target 3 waiting requests per pod: a
choice, not a published setting.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

from semipd.sim.fleet.controller import Action, FleetView, Note, SetReplicas

TARGET_QUEUE = 3.0
TOLERANCE = 0.1
SYNC_S = 15.0
DOWN_WINDOW_S = 300.0


class HPAQueueController:
    def __init__(self, pool: str, target: float = TARGET_QUEUE, sync_s: float = SYNC_S,
                 down_window_s: float = DOWN_WINDOW_S, name: str = "hpa-queue") -> None:  # fmt: skip
        self.pool = pool
        self.target = target
        self.sync_s = sync_s
        self.down_window_s = down_window_s
        self._name = name
        self._recs: deque[tuple[float, int]] = deque()
        self._notes: list[Note] = []

    @property
    def name(self) -> str:
        return self._name

    @property
    def interval_s(self) -> float:
        return self.sync_s

    def control(self, view: FleetView) -> Sequence[Action]:
        pool = view.pools()[self.pool]
        current = pool.desired
        queues = []
        for inst in pool.ready():
            g = view.series(inst).gauges
            if g is not None:
                queues.append(float(g.queued))
        if not queues:
            return ()
        ratio = (sum(queues) / len(queues)) / self.target
        raw = current if abs(ratio - 1.0) <= TOLERANCE else math.ceil(len(queues) * ratio)
        now = view.now
        self._recs.append((now, raw))
        while self._recs and self._recs[0][0] < now - self.down_window_s:
            self._recs.popleft()
        desired = raw
        if desired < current:
            desired = min(current, max(r for _, r in self._recs))
        desired = min(desired, max(2 * current, current + 4))
        desired = max(pool.min_replicas, min(pool.max_replicas, desired))
        if desired == current:
            return ()
        self._notes.append(
            Note(now, "ScaleOut" if desired > current else "ScaleIn", "QueueLength", self.pool, None,
                 f"{current} -> {desired}: mean queue {ratio * self.target:.2f} (target {self.target:g})")
        )  # fmt: skip
        return (SetReplicas(self.pool, desired, "hpa"),)

    def notes(self) -> Sequence[Note]:
        return self._notes
