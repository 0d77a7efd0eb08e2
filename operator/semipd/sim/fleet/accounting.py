"""Accounting of a fleet-simulator run: the periodic timeline sample and the final RunResult
(outcome statistics, accelerator-hours and cost per pool, the action log)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from semipd.sim.fleet.metrics import histogram_quantile, sum_counts
from semipd.sim.fleet.requests import SimRequest
from semipd.sim.fleet.results import ActionRecord, RunResult, Sample, fine_quantile, outcome_stats, percentile

if TYPE_CHECKING:
    from semipd.sim.fleet.fleet import Simulator


def take_sample(sim: Simulator, since: float, now: float, done: Sequence[SimRequest]) -> Sample:
    """One timeline sample: what finished since the last one, what Prometheus shows, the fleet's shape."""
    period = now - since
    slo_t, slo_i = sim.setup.ttft_slo_s, sim.setup.itl_slo_s
    served = [r for r in done if not r.rejected]
    ttfts = [r.ttft for r in served]
    tpots = [r.tpot for r in served if r.output > 1]
    window = max(60.0, sim.setup.scrape_s * 4)
    itl_prom: float | None = None
    replicas = {}
    splits: dict[str, tuple[int, int]] = {}
    accelerators = 0
    for pool in sim.pools().values():
        ready = pool.ready()
        replicas[pool.name] = (pool.desired, len(pool.members()), len(ready))
        accelerators += pool.holding() * pool.accelerators_per_replica
        itl_parts = []
        for inst in ready:
            sp = inst.split()
            if sp is not None:
                splits[inst.name] = sp
            delta = sim.series(inst).window(now, window)
            if delta is not None:
                itl_parts.append(delta.itl)
        if itl_parts:
            q = histogram_quantile(0.99, pool.setup.metrics.itl_buckets, sum_counts(itl_parts))
            if not math.isnan(q):
                itl_prom = q if itl_prom is None else max(itl_prom, q)
    arrivals = sim.arrivals_between(since, now)
    return Sample(
        now,
        arrivals / period if period > 0 else 0.0,
        len(served),
        (sum(1 for r in served if r.attains(slo_t, slo_i)) / len(served)) if served else None,
        percentile(ttfts, 0.99) if ttfts else None,
        percentile(tpots, 0.99) if tpots else None,
        percentile(ttfts, 0.5) if ttfts else None,
        itl_prom,
        replicas,
        splits,
        accelerators,
    )


def build_result(sim: Simulator, name: str, end: float, last_arrival: float, wall: float) -> RunResult:
    """The run's RunResult: outcome statistics, accelerator-hours and cost per pool, the action log."""
    slo_t, slo_i = sim.setup.ttft_slo_s, sim.setup.itl_slo_s
    stats = outcome_stats(sim.requests, slo_t, slo_i)
    hours = 0.0
    cost = 0.0
    pools: dict[str, Any] = {}
    for pool in sim.pools().values():
        s = pool.setup
        replica_s = 0.0
        for inst in (*pool._members, *pool.draining, *pool.gone):
            if math.isnan(inst.scheduled_at):
                continue
            stop = inst.removed_at if not math.isnan(inst.removed_at) else end
            replica_s += max(0.0, stop - inst.scheduled_at)
        peak = max((smp.replicas[pool.name][1] for smp in sim.timeline), default=s.replicas)
        acc_h = replica_s * s.accelerators_per_replica / 3600.0
        pools[pool.name] = {
            "kind": s.kind,
            "hardware": s.model.hardware.name,
            "model": s.model.model.name,
            "accelerators_per_replica": s.accelerators_per_replica,
            "replica_hours": replica_s / 3600.0,
            "accelerator_hours": acc_h,
            "peak_replicas": peak,
        }
        hours += acc_h
        cost += replica_s / 3600.0 * s.cost_per_hour
    for note in sim.controller.notes() if sim.controller is not None else ():
        target = note.pod or note.node_pool or "-"
        sim.actions.append(ActionRecord(note.time, name, note.action, target, note.message, note.reason))
    sim.actions.sort(key=lambda a: a.time)
    return RunResult(
        name=name,
        ttft_slo_s=slo_t,
        itl_slo_s=slo_i,
        arrivals=stats["arrivals"],
        finished=stats["finished"],
        rejected=stats["rejected"],
        attainment=stats["attainment"],
        ttft_attainment=stats["ttft_attainment"],
        tpot_attainment=stats["tpot_attainment"],
        ttft_p50=stats["ttft_p50"],
        ttft_p99=stats["ttft_p99"],
        tpot_p50=stats["tpot_p50"],
        tpot_p99=stats["tpot_p99"],
        itl_p99=fine_quantile(sim.fine_itl.counts, 0.99),
        e2e_p50=stats["e2e_p50"],
        accelerator_hours=hours,
        cost=cost,
        duration_s=end,
        last_arrival_s=last_arrival,
        wall_s=wall,
        events=sim.events,
        actions=sim.actions,
        timeline=sim.timeline,
        pools=pools,
        kv_placement=sim.kv_log,
    )
