"""Kubernetes HPA on the per-pod queue (baselines.md §7), on a stand-in fleet view."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from semipd.sim.fleet.baselines.hpa_queue import HPAQueueController
from semipd.sim.fleet.metrics import Gauges, ScrapeSeries


@dataclass
class Pod:
    name: str


@dataclass
class PoolStub:
    desired: int
    queues: list[int]
    min_replicas: int = 1
    max_replicas: int = 20

    def ready(self) -> list[Pod]:
        return [Pod(f"p{k}") for k in range(len(self.queues))]


@dataclass
class View:
    pool: PoolStub
    now: float = 0.0
    scrape_s: float = 15.0
    _series: dict[str, ScrapeSeries] = field(default_factory=dict)

    def pools(self) -> dict[str, Any]:
        return {"gpu": self.pool}

    def series(self, pod: Pod) -> ScrapeSeries:
        s = ScrapeSeries(600)
        s.gauges = Gauges(0, self.pool.queues[int(pod.name[1:])], 0.0)
        return s


def decide(hpa: HPAQueueController, view: View) -> int:
    acts = hpa.control(view)  # type: ignore[arg-type]
    return acts[0].replicas if acts else view.pool.desired


def test_scale_up_by_the_ratio_with_the_rate_limit() -> None:
    hpa = HPAQueueController("gpu", target=3)
    assert decide(hpa, View(PoolStub(2, [6, 6]))) == 4  # ratio 2
    assert decide(hpa, View(PoolStub(2, [30, 30]))) == 6  # ceil(2 x 10) = 20, limited to max(2x, +4) = 6


def test_tolerance_band_holds() -> None:
    hpa = HPAQueueController("gpu", target=3)
    assert decide(hpa, View(PoolStub(4, [3, 3, 3, 4]))) == 4  # ratio 1.08


def test_scale_down_waits_for_the_stabilization_window() -> None:
    hpa = HPAQueueController("gpu", target=3)
    assert decide(hpa, View(PoolStub(4, [3, 3, 3, 3]), now=0.0)) == 4
    assert decide(hpa, View(PoolStub(4, [0, 0, 0, 0]), now=100.0)) == 4  # the 300 s window still holds 4
    assert decide(hpa, View(PoolStub(4, [0, 0, 0, 0]), now=301.0)) == 1  # to minReplicas
