"""Small fleets and traces for the fleet simulator's tests."""

from __future__ import annotations

from collections.abc import Sequence

from semipd.engines.sim import SIM_METRICS
from semipd.perf import LatencyModel
from semipd.sim.fleet.fleet import Simulator
from semipd.sim.fleet.instance import InstanceConfig
from semipd.sim.fleet.setup import FleetSetup, PoolSetup
from semipd.traces import TraceRequest

H200_8B = LatencyModel.from_names("h200", "llama-3-8b")


def pool(
    replicas: int = 1,
    kind: str = "semipd",
    model: LatencyModel = H200_8B,
    lo: int | None = None,
    hi: int | None = None,
    name: str = "gpu",
    startup_s: float = 30.0,
    capacity: int | None = None,
    **cfg: object,
) -> PoolSetup:
    return PoolSetup(
        name=name,
        model=model,
        kind=kind,
        instance=InstanceConfig(**cfg),  # type: ignore[arg-type]
        replicas=replicas,
        min_replicas=replicas if lo is None else lo,
        max_replicas=replicas if hi is None else hi,
        metrics=SIM_METRICS,
        startup_s=startup_s,
        capacity=capacity,
    )


def fleet(*pools: PoolSetup, ttft: float = 1.0, itl: float = 0.05, **opts: object) -> FleetSetup:
    return FleetSetup(pools=tuple(pools), ttft_slo_s=ttft, itl_slo_s=itl, **opts)  # type: ignore[arg-type]


def reqs(*items: tuple[float, int, int]) -> list[TraceRequest]:
    return [TraceRequest(t, i, o) for t, i, o in items]


def run(setup: FleetSetup, trace: Sequence[TraceRequest], controller: object = None) -> Simulator:
    sim = Simulator(setup, controller)  # type: ignore[arg-type]
    sim.run(trace)
    return sim
