"""The discrete-event loop: arrivals from a trace, instance events, pod lifecycle, simulated
Prometheus scrapes, controller ticks, and the accounting that becomes a RunResult.

One heap of (time, seq, handler, arg); arrivals are merged from the sorted trace instead of being
pushed. Decode batches are stepped (one event per decode iteration, not per token), and a step's
tokens are counted in bulk, so cost grows with instance-busy time, not tokens.

With a `kv_spec`, the simulated operator re-plans the KV-cache placement with the shipped
`plan_kv_placement` at its interval, from the scraped KV-usage gauges (mean over each pool's ready
pods) and the share of long prompts each pool was sent, and the router reads the result.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time as wallclock
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from semipd.api.durations import to_seconds
from semipd.api.v1alpha1 import InferencePoolSpec, KVCachePlacementStatus, KVCachePolicy
from semipd.policy.kvcache import KVPoolObservation, plan_kv_placement
from semipd.sim.fleet.accounting import build_result, take_sample
from semipd.sim.fleet.baselines.colocated import ColocatedInstance
from semipd.sim.fleet.controller import Controller, SetReplicas, SetSplit
from semipd.sim.fleet.instance import Instance, State
from semipd.sim.fleet.metrics import EngineCounters, Histogram, ScrapeSeries
from semipd.sim.fleet.pools import PoolState
from semipd.sim.fleet.requests import SimRequest
from semipd.sim.fleet.results import (
    FINE_ITL_BOUNDS,
    ActionRecord,
    KVPlacementRecord,
    RunResult,
    Sample,
)
from semipd.sim.fleet.router import KVSteering, Router
from semipd.sim.fleet.semipd_instance import SemiPDInstance
from semipd.sim.fleet.setup import FleetSetup
from semipd.traces import TraceRequest

_TICK_OFFSET = 1e-6
"""Controller ticks run just after the scrape due at the same instant (the query follows the scrape)."""


class Simulator:
    """One run of one fleet under one controller (not reusable)."""

    def __init__(self, setup: FleetSetup, controller: Controller | None = None) -> None:
        self.setup = setup
        self.controller = controller
        self.heap: list[tuple[float, int, Callable[[Any, float], None], Any]] = []
        self._seq = 0
        self._now = 0.0
        self._pools: dict[str, PoolState] = {p.name: PoolState(p) for p in setup.pools}
        self.entry = [p for p in self._pools.values() if p.role in ("serve", "prefill")]
        self.decoders = [p for p in self._pools.values() if p.role == "decode"]
        if not self.entry:
            raise ValueError("the fleet has no pool that takes requests (serve or prefill)")
        if any(p.role == "prefill" for p in self._pools.values()) and not self.decoders:
            raise ValueError("a disaggregated fleet needs a decode pool")
        self.router = Router(setup.router, setup.seed)
        self._series: dict[str, ScrapeSeries] = {}
        self.fine_itl = Histogram(FINE_ITL_BOUNDS)
        self.requests: list[SimRequest] = []
        self._arrival_times: list[float] = []
        self._finish_log: list[SimRequest] = []
        self._finish_times: list[float] = []
        self.handoffs: deque[tuple[SimRequest, SemiPDInstance]] = deque()
        self.remaining = 0
        self.actions: list[ActionRecord] = []
        self.timeline: list[Sample] = []
        self._last_sample = 0.0
        self._sample_index = 0
        self.events = 0
        self.kv = KVSteering(setup.kv_routing)
        self.kv_log: list[KVPlacementRecord] = []
        self._kv_sent: dict[str, list[int]] = {p.name: [0, 0] for p in setup.pools}
        """Per pool: [requests, long requests] routed since the last KV plan."""
        self._kv_window: deque[dict[str, list[int]]] = deque()
        """The last plans' _kv_sent, covering the spec's SLO window (what a rate over the window sees)."""

    # --- scheduling ------------------------------------------------------------------------------

    def at(self, t: float, fn: Callable[[Any, float], None], arg: Any) -> None:
        heapq.heappush(self.heap, (t, self._seq, fn, arg))
        self._seq += 1

    # --- FleetView ---------------------------------------------------------------------------------

    @property
    def now(self) -> float:
        return self._now

    @property
    def scrape_s(self) -> float:
        return self.setup.scrape_s

    def pools(self) -> Mapping[str, PoolState]:
        return self._pools

    def series(self, instance: Instance) -> ScrapeSeries:
        return self._series[instance.name]

    def arrivals_between(self, t0: float, t1: float) -> int:
        return bisect_right(self._arrival_times, t1) - bisect_right(self._arrival_times, t0)

    def finished_between(self, t0: float, t1: float) -> Sequence[SimRequest]:
        lo = bisect_right(self._finish_times, t0)
        hi = bisect_right(self._finish_times, t1)
        return self._finish_log[lo:hi]

    # --- Host callbacks ----------------------------------------------------------------------------

    def finished(self, r: SimRequest, now: float) -> None:
        self.remaining -= 1
        self._finish_log.append(r)
        self._finish_times.append(now)
        if self.handoffs:
            self._flush_handoffs(now)

    def dropped(self, r: SimRequest, now: float, reason: str) -> None:
        r.rejected = reason
        self.remaining -= 1

    def handoff(self, r: SimRequest, source: SemiPDInstance, now: float) -> None:
        self.handoffs.append((r, source))
        self._flush_handoffs(now)

    def drained(self, inst: Instance, now: float) -> None:
        pool = self._pools[inst.pool]
        inst.removed_at = now
        if inst in pool.draining:
            pool.draining.remove(inst)
        pool.gone.append(inst)
        self._schedule_pending(pool, now)

    def split_done(self, inst: Instance, now: float) -> None:
        split = inst.split()
        self.actions.append(ActionRecord(now, self._controller_name, "SplitDone", inst.name, f"{split}"))

    @property
    def _controller_name(self) -> str:
        return self.controller.name if self.controller is not None else "none"

    # --- disaggregated handoff ---------------------------------------------------------------------

    def _flush_handoffs(self, now: float) -> None:
        while self.handoffs:
            r, source = self.handoffs[0]
            dest: SemiPDInstance | None = None
            for pool in self.decoders:
                for inst in pool.members():
                    if (
                        isinstance(inst, SemiPDInstance)
                        and inst.can_take_decode(r)
                        and (dest is None or inst.outstanding < dest.outstanding)
                    ):
                        dest = inst
            if dest is None:
                return  # FIFO: the head waits for decode room, holding its prefill KV
            self.handoffs.popleft()
            dest.reserve_decode(r)
            seconds = r.input * source.model.kv_bytes_per_token() / (self.setup.kv_link_gbs * 1e9)
            self.at(now + seconds, self._transfer_done, (r, source, dest))

    def _transfer_done(self, arg: tuple[SimRequest, SemiPDInstance, SemiPDInstance], now: float) -> None:
        r, source, dest = arg
        source.release_handoff(r, now)
        dest.transfer_arrived(r, now)

    # --- pods ------------------------------------------------------------------------------------

    def _create(self, pool: PoolState, now: float, warm: bool = False) -> Instance:
        s = pool.setup
        name = f"{s.name}-{pool.created}"
        pool.created += 1
        counters = EngineCounters(s.metrics.ttft_buckets, s.metrics.itl_buckets, self.fine_itl)
        cfg = s.instance
        if cfg.kv_wait_s is None and self.setup.kv_wait_s is not None:
            cfg = replace(cfg, kv_wait_s=self.setup.kv_wait_s)
        if self.setup.prefix_cache and cfg.prefix_cache_blocks is None and s.kind != "decode":
            capacity = cfg.kv_capacity or s.model.kv_capacity_tokens()
            blocks = int(capacity * self.setup.prefix_cache_fraction) // 512
            cfg = replace(cfg, prefix_cache_blocks=max(1, blocks))
        inst: Instance
        if s.kind == "colocated":
            inst = ColocatedInstance(name, s.name, s.model, cfg, self, counters, now)
        else:
            inst = SemiPDInstance(name, s.name, s.model, cfg, self, counters, now, role=s.role)
        self._series[name] = ScrapeSeries(self.setup.keep_s)
        pool._members.append(inst)
        if pool.room() > 0:
            self._schedule(inst, now, warm)
        return inst

    def _schedule(self, inst: Instance, now: float, warm: bool) -> None:
        pool = self._pools[inst.pool]
        inst.state = State.STARTING
        inst.scheduled_at = now
        if warm:
            self._pod_ready(inst, now)
        else:
            self.at(now + pool.setup.startup_s, self._pod_ready, inst)

    def _schedule_pending(self, pool: PoolState, now: float) -> None:
        for inst in list(pool.members()):
            if pool.room() <= 0:
                return
            if inst.state is State.PENDING:
                self._schedule(inst, now, False)

    def _pod_ready(self, inst: Instance, now: float) -> None:
        if inst.state is not State.STARTING:
            return
        inst.become_ready(now)
        if inst.role == "decode" and self.handoffs:
            self._flush_handoffs(now)

    def set_replicas(self, pool: PoolState, n: int, now: float) -> int:
        n = max(pool.min_replicas, min(pool.max_replicas, n))
        pool.desired = n
        members = pool._members
        if n > len(members):
            for _ in range(n - len(members)):
                self._create(pool, now)
        elif n < len(members):
            # Kubernetes' ReplicaSet order: unscheduled first, then not ready, then the newest ready.
            def rank(i: Instance) -> tuple[int, float]:
                order = {State.PENDING: 0, State.STARTING: 1}.get(i.state, 2)
                return order, -(i.ready_at if not math.isnan(i.ready_at) else i.created)

            for victim in sorted(members, key=rank)[: len(members) - n]:
                self._remove(pool, victim, now)
        return n

    def _remove(self, pool: PoolState, inst: Instance, now: float) -> None:
        pool._members.remove(inst)
        if inst.state is State.PENDING:
            inst.state = State.GONE
            return
        if inst.state is State.STARTING:
            inst.state = State.GONE
            inst.removed_at = now
            pool.gone.append(inst)
            self._schedule_pending(pool, now)
            return
        pool.draining.append(inst)
        inst.drain(now)

    # --- arrivals ----------------------------------------------------------------------------------

    def _arrive(self, r: SimRequest, now: float) -> None:
        candidates = [i for p in self.entry for i in p._members if i.state is State.READY]
        if not candidates:
            self.dropped(r, now, "no-replica")
            return
        why = ""
        admissible = []
        for inst in candidates:
            reason = inst.admissible(r)
            if reason:
                why = why or reason
            else:
                admissible.append(inst)
        if not admissible:
            self.dropped(r, now, why)
            return
        chosen = self.router.pick(r, self.kv.candidates(r, admissible))
        sent = self._kv_sent[chosen.pool]
        sent[0] += 1
        if self.kv.is_long(r):
            sent[1] += 1
        chosen.submit(r, now)

    # --- KV-cache placement --------------------------------------------------------------------

    def _kv_observe(self, spec: InferencePoolSpec) -> dict[str, KVPoolObservation]:
        """What the operator's queries would return: ready pods and mean KV usage per node pool, and the
        share of long prompts each pool was sent over the SLO window."""
        interval = self.setup.kv_interval_s or to_seconds(spec.autoscaling.interval)
        self._kv_window.append(self._kv_sent)
        while len(self._kv_window) > max(1, math.ceil(to_seconds(spec.slo.window) / interval)):
            self._kv_window.popleft()
        self._kv_sent = {p.name: [0, 0] for p in self.setup.pools}
        observed = {}
        for np in spec.node_pools:
            pool = self._pools.get(np.name)
            if pool is None:
                continue
            ready = pool.ready()
            gauges = [g.kv_usage for i in ready if (g := self._series[i.name].gauges) is not None]
            usage = min(1.0, sum(gauges) / len(gauges)) if gauges else None
            sent = sum(w[np.name][0] for w in self._kv_window)
            long = sum(w[np.name][1] for w in self._kv_window)
            observed[np.name] = KVPoolObservation(np.name, len(ready), usage, long / sent if sent else None)
        return observed

    def _kv_plan(self, _: None, now: float) -> None:
        spec = self.setup.kv_spec
        assert spec is not None
        observed = self._kv_observe(spec)
        stamp = datetime.fromtimestamp(now, UTC).isoformat().replace("+00:00", "Z")
        current = self.kv.status
        status = plan_kv_placement(spec, observed, current, stamp)
        self.kv.update(status)
        if current is None or status.long_context_pools != current.long_context_pools:
            self.kv_log.append(KVPlacementRecord.of(now, status))
        interval = self.setup.kv_interval_s or to_seconds(spec.autoscaling.interval)
        self.at(now + interval, self._kv_plan, None)

    @property
    def kv_status(self) -> KVCachePlacementStatus | None:
        return self.kv.status

    # --- periodic ----------------------------------------------------------------------------------

    def _scrape(self, _: None, now: float) -> None:
        for pool in self._pools.values():
            for inst in (*pool._members, *pool.draining):
                if inst.state in (State.READY, State.DRAINING):
                    self._series[inst.name].scrape(now, inst.counters.snapshot(), inst.gauges())
        self.at(now + self.setup.scrape_s, self._scrape, None)

    def _tick(self, _: None, now: float) -> None:
        assert self.controller is not None
        for action in self.controller.control(self):
            self._apply(action, now)
        self.at(now + self.controller.interval_s, self._tick, None)

    def _apply(self, action: SetSplit | SetReplicas, now: float) -> None:
        name = self._controller_name
        if isinstance(action, SetReplicas):
            pool = self._pools.get(action.pool)
            if pool is None:
                self.actions.append(ActionRecord(now, name, "SetReplicas", action.pool, str(action.replicas),
                                                 action.reason, "no such pool"))  # fmt: skip
                return
            before = pool.desired
            applied = self.set_replicas(pool, action.replicas, now)
            if applied != before:
                self.actions.append(
                    ActionRecord(now, name, "SetReplicas", pool.name, f"{before}->{applied}", action.reason)
                )
            return
        inst = next((i for p in self._pools.values() for i in p._members if i.name == action.instance), None)
        value = f"{action.prefill_percent}/{action.decode_percent}"
        if inst is None:
            self.actions.append(
                ActionRecord(now, name, "SetSplit", action.instance, value, action.reason, "no such pod")
            )
            return
        error = inst.request_split(action.prefill_percent, action.decode_percent, now)
        self.actions.append(ActionRecord(now, name, "SetSplit", inst.name, value, action.reason, error or ""))

    def _sample(self, _: None, now: float) -> None:
        done = self._finish_log[self._sample_index :]
        self._sample_index = len(self._finish_log)
        self.timeline.append(take_sample(self, self._last_sample, now, done))
        self._last_sample = now
        self.at(now + self.setup.sample_s, self._sample, None)

    # --- run ---------------------------------------------------------------------------------------

    def run(self, trace: Sequence[TraceRequest], name: str | None = None) -> RunResult:
        started = wallclock.perf_counter()
        reqs = [SimRequest(i, t) for i, t in enumerate(trace)]
        if any(b.arrival < a.arrival for a, b in itertools.pairwise(reqs)):
            reqs.sort(key=lambda r: r.arrival)
        self.requests = reqs
        self._arrival_times = [r.arrival for r in reqs]
        self.remaining = len(reqs)
        for pool in self._pools.values():
            for _ in range(pool.setup.replicas):
                self._create(pool, 0.0, warm=True)
        self.at(0.0, self._scrape, None)
        self.at(self.setup.sample_s + 2 * _TICK_OFFSET, self._sample, None)
        if self.controller is not None:
            self.at(self.controller.interval_s + _TICK_OFFSET, self._tick, None)
        kv = self.setup.kv_spec
        if kv is not None:
            # A spec that can never steer is planned once (for status); the others at every interval.
            steady = kv.placement.kv_cache.policy == KVCachePolicy.OFF or (
                kv.placement.kv_cache.long_context_threshold >= kv.model.max_context_length
            )
            if steady:
                self.kv.update(plan_kv_placement(kv, self._kv_observe(kv), None, "1970-01-01T00:00:00Z"))
            else:
                self.at(2 * _TICK_OFFSET, self._kv_plan, None)
        last_arrival = reqs[-1].arrival if reqs else 0.0
        horizon = last_arrival + self.setup.drain_limit_s
        heap = self.heap
        pop = heapq.heappop
        i, n = 0, len(reqs)
        next_arrival = reqs[0].arrival if reqs else math.inf
        events = 0
        now = 0.0
        while True:
            if heap and heap[0][0] <= next_arrival:
                now, _, fn, arg = pop(heap)
                if now > horizon:
                    break
                self._now = now
                fn(arg, now)
            elif i < n:
                r = reqs[i]
                i += 1
                now = r.arrival
                self._now = now
                self._arrive(r, now)
                next_arrival = reqs[i].arrival if i < n else math.inf
            else:
                break
            events += 1
            if i >= n and self.remaining <= 0:
                break
        self._now = now
        for r in reqs:
            if not r.done and not r.rejected:
                r.rejected = "unfinished"
        self.events = events
        return build_result(self, name or self._controller_name, now, last_arrival, wallclock.perf_counter() - started)


def simulate(
    setup: FleetSetup, trace: Sequence[TraceRequest], controller: Controller | None = None, name: str | None = None
) -> RunResult:
    """Replay `trace` through the fleet under `controller` (None: nothing changes)."""
    return Simulator(setup, controller).run(trace, name)
