"""`plan()`: the SLO autoscaler as one pure, deterministic function of (spec, observation, state).

Order of levers (architecture.md, "Control loop"):
1. split first: per pod, move the prefill and decode shares to the point with the most headroom on both SLOs
   (bounded step, hysteresis, cooldown, spec bounds); seconds, no new accelerators;
2. replicas second: when no split gives the fleet enough SLO capacity for the observed demand, add
   the replicas the fitted model says are missing; remove one only after both SLOs had slack for
   the stabilization window and the model says the rest still meets the SLO;
3. the cheapest pool with room third: new capacity goes where cost per unit of SLO capacity is
   lowest; pods left unschedulable past the timeout move their demand to the next pool.
Unknown or stale metrics hold everything (fail-static).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from semipd.api.durations import to_seconds
from semipd.api.v1alpha1 import AutoscalingMode, InferencePoolSpec, NodePool
from semipd.perf import LatencyModel, contended_shares
from semipd.policy.estimator import Estimator, Fit, Sample, refit
from semipd.policy.observation import NodePoolObservation, Observation, PodObservation
from semipd.policy.state import ControllerState, Decision, Plan, SplitChange

CAPACITY_MARGIN = 0.10
"""Headroom (fraction of each SLO) the replica controller provisions for."""
SPLIT_HYSTERESIS = 0.05
"""Predicted headroom gain a split move must bring when nothing is violated."""
SPLIT_COMFORT = 0.25
"""Observed headroom on both SLOs above which a split is left alone (a switch is not free)."""
STALE_INTERVALS = 3.0
"""Observations older than this many evaluation intervals are stale."""
MIN_WINDOW_REQUESTS = 20.0
"""Finished requests a pod's window must hold before its p99s drive a split move or a fit (a p99 of a
handful of requests is noise; Semi-PD's own controller waits for 400)."""
FULL_HOLD_S = 600.0
"""How long a node pool found full stays out of scale-out decisions."""
MODEL_DOUBT_INTERVALS = 3.0
"""Evaluation intervals an SLO may stay missed, with no split change left to fix it, while the fitted
model still claims enough capacity, before one replica is added anyway (the model is wrong)."""


@dataclass(frozen=True)
class PoolContext:
    """What the planner needs to know about one node pool beyond the spec."""

    model: LatencyModel
    split_supported: bool
    split_cost_s: float
    """Seconds one split change takes (standby swap or restart): the cooldown's floor."""


def _f(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.4g}"


def _headroom(ttft: float | None, itl: float | None, s_ttft: float, s_itl: float) -> float | None:
    if ttft is None or itl is None:
        return None
    return min((s_ttft - ttft) / s_ttft, (s_itl - itl) / s_itl)


def _per_token(total: float | None, rate: float | None) -> float | None:
    if total is None or rate is None or rate <= 0:
        return None
    return total / rate


def _sample(pod: PodObservation, window_s: float) -> Sample | None:
    if (
        not pod.ready
        or pod.ttft_p99 is None
        or pod.request_rate is None
        or pod.request_rate * window_s < MIN_WINDOW_REQUESTS
        or pod.prefill_percent is None
        or pod.decode_percent is None
    ):
        return None
    x, y = contended_shares(pod.prefill_percent / 100.0, pod.decode_percent / 100.0)
    return Sample(x, y, pod.request_rate, pod.ttft_p99, pod.itl_p99, pod.running, pod.queued)


def _calibrated(est: Estimator, sample: Sample) -> Estimator:
    """The pool estimator pinned to one pod's own observation (a1 and ITL scale from this pod)."""
    room = sample.prefill_share - sample.rate * est.l100()
    fit = est.fit
    if room > 0:
        fit = replace(fit, a1=sample.ttft * room)
    if sample.itl is not None and sample.batch is not None:
        modelled = est._step(max(1.0, sample.batch), sample.decode_share)
        if modelled > 0:
            fit = replace(fit, itl_scale=sample.itl / modelled)
    return Estimator(est.model, fit)


@dataclass
class _Run:
    """Mutable scratch space of one plan() call (never escapes it)."""

    spec: InferencePoolSpec
    obs: Observation
    state: ControllerState
    pools: Mapping[str, PoolContext]
    replicas: dict[str, int]
    decisions: list[Decision]
    ttft_slo: float
    itl_slo: float
    window_s: float
    fix_expected: dict[str, float]
    """Pod -> time of a split change predicted to clear its violation (scale-out waits while it settles)."""

    @property
    def now(self) -> float:
        return self.obs.time

    def decide(
        self,
        action: str,
        reason: str,
        message: str,
        node_pool: str | None = None,
        pod: str | None = None,
        **details: float | int | str,
    ) -> None:
        self.decisions.append(
            Decision(self.now, action, reason, node_pool, pod, message, {k: str(v) for k, v in details.items()})
        )


def _settling(run: _Run, pod: str) -> bool:
    """The pod's split changed within the last observation window: its p99s still mix both splits."""
    return run.now - run.state.last_split_change.get(pod, -math.inf) < run.window_s


def _awaiting_fix(run: _Run, pod: str) -> bool:
    """The pod's last split change, within the last window, was predicted to clear its SLO miss."""
    return run.now - run.fix_expected.get(pod, -math.inf) < run.window_s


def _split_allowed(spec: InferencePoolSpec, ctx: PoolContext) -> bool:
    moves_splits = spec.autoscaling.mode in (AutoscalingMode.SEMIPD, AutoscalingMode.EXTERNAL)
    return moves_splits and spec.semi_pd.enabled and ctx.split_supported


def _span(lo: int, hi: int, around: int | None, step: int) -> list[int]:
    if around is None:
        return list(range(lo, hi + 1))
    return list(range(max(lo, around - step), min(hi, around + step) + 1))


def _candidates(spec: InferencePoolSpec, around: tuple[int, int] | None = None) -> list[tuple[int, int]]:
    """(prefill, decode) splits within the spec's bounds; with `around`, within one step of it on each
    share, closest first (so ties keep the split that moves least)."""
    sp = spec.semi_pd
    x0, y0 = around if around is not None else (None, None)
    xs = _span(sp.min_prefill_percent, sp.max_prefill_percent, x0, sp.step_percent)
    ys = _span(sp.min_decode_percent, sp.max_decode_percent, y0, sp.step_percent)
    pairs = [(x, y) for x in xs for y in ys]
    if x0 is not None and y0 is not None:
        pairs.sort(key=lambda p: (abs(p[0] - x0) + abs(p[1] - y0), p))
    return pairs


def _coarse(values: list[int], stride: int) -> list[int]:
    return sorted({*values[::stride], values[-1]})


def _refit_all(run: _Run) -> dict[str, Fit]:
    fits = dict(run.state.fits)
    for np in run.spec.node_pools:
        fit = fits.get(np.name, Fit())
        pool_obs = run.obs.pools.get(np.name)
        prompt = _per_token(pool_obs.prompt_tokens_rate, pool_obs.request_rate) if pool_obs else None
        output = _per_token(pool_obs.generation_tokens_rate, pool_obs.request_rate) if pool_obs else None
        changed = False
        for pod in sorted(run.obs.pods_of(np.name), key=lambda p: p.pod):
            sample = _sample(pod, run.window_s)
            if sample is not None and not _settling(run, pod.pod):
                fit = fit.observe(sample, prompt, output)
                changed = True
        fits[np.name] = refit(run.pools[np.name].model, fit) if changed else fit
    return fits


def _plan_splits(run: _Run, fits: Mapping[str, Fit], last_change: dict[str, float]) -> list[SplitChange]:
    changes = []
    interval = to_seconds(run.spec.autoscaling.interval)
    for np in run.spec.node_pools:
        ctx = run.pools[np.name]
        if not _split_allowed(run.spec, ctx):
            continue
        cooldown = max(2.0 * interval, 3.0 * ctx.split_cost_s)
        est = Estimator(ctx.model, fits[np.name])
        for pod in sorted(run.obs.pods_of(np.name), key=lambda p: p.pod):
            sample = _sample(pod, run.window_s)
            if sample is None or pod.itl_p99 is None:
                continue  # unknown or idle: never move a split on no data
            if run.now - last_change.get(pod.pod, -math.inf) < cooldown or _settling(run, pod.pod):
                continue
            x0, y0 = int(pod.prefill_percent or 0), int(pod.decode_percent or 0)
            observed = _headroom(pod.ttft_p99, pod.itl_p99, run.ttft_slo, run.itl_slo)
            assert observed is not None
            pinned = _calibrated(est, sample)
            best, predicted = pinned.best_split(_candidates(run.spec, (x0, y0)), sample.rate, run.ttft_slo, run.itl_slo)
            if best == (x0, y0) or observed >= SPLIT_COMFORT:
                continue
            # Compare the model with itself (best vs current split): the pinned fit reproduces the
            # observation at x0 when the pod is not saturated, and still ranks splits when it is.
            before = pinned.headroom(x0, y0, sample.rate, run.ttft_slo, run.itl_slo)
            gain = predicted - before
            if not ((observed < 0 and gain > 0) or gain > SPLIT_HYSTERESIS):
                continue
            ttft_breach = sample.ttft > run.ttft_slo
            itl_breach = pod.itl_p99 > run.itl_slo
            reason = "TTFTOverSLO" if ttft_breach else "ITLOverSLO" if itl_breach else "MoreHeadroom"
            changes.append(SplitChange(pod.pod, np.name, best[0], best[1], (x0, y0)))
            if observed < 0 <= predicted:
                run.fix_expected[pod.pod] = run.now
            else:
                run.fix_expected.pop(pod.pod, None)
            last_change[pod.pod] = run.now
            run.decide(
                "SplitChange",
                reason,
                f"prefill {x0}% -> {best[0]}%, decode {y0}% -> {best[1]}%",
                np.name,
                pod.pod,
                ttftP99=_f(sample.ttft),
                itlP99=_f(pod.itl_p99),
                predictedTTFT=_f(pinned.ttft(*best, sample.rate)),
                predictedITL=_f(pinned.itl(*best, sample.rate)),
                observedHeadroom=_f(observed),
                headroomBefore=_f(before),
                headroomAfter=_f(predicted),
                rate=_f(sample.rate),
            )
    return changes


def _capacity(run: _Run, np: NodePool, fits: Mapping[str, Fit]) -> float:
    """SLO capacity of one replica of `np` (arrivals/s) with the best split the controller may use."""
    ctx = run.pools[np.name]
    est = Estimator(ctx.model, fits[np.name])
    sp = run.spec.semi_pd
    if _split_allowed(run.spec, ctx):
        # A 5-point prefill and 10-point decode grid is plenty for capacity (the split controller
        # refines per pod).
        xs = _coarse(_span(sp.min_prefill_percent, sp.max_prefill_percent, None, 0), 5)
        ys = _coarse(_span(sp.min_decode_percent, sp.max_decode_percent, None, 0), 10)
        candidates = [(x, y) for x in xs for y in ys]
    elif ctx.split_supported:
        candidates = [(sp.initial_prefill_percent, sp.initial_decode_percent)]
    else:
        candidates = [(100, 100)]
    return est.capacity(candidates, run.ttft_slo, run.itl_slo, CAPACITY_MARGIN)


def _demand(pool: NodePoolObservation | None, interval: float) -> float | None:
    if pool is None or pool.request_rate is None:
        return None
    return pool.request_rate + (pool.queued or 0.0) / max(interval, 1.0)


def _cost_order(run: _Run, caps: Mapping[str, float]) -> list[NodePool]:
    usable = [np for np in run.spec.node_pools if caps[np.name] > 0]
    return sorted(usable, key=lambda np: (np.cost_per_hour / caps[np.name], -np.priority, np.name))


def _fallback(run: _Run, caps: Mapping[str, float], full: dict[str, float]) -> None:
    timeout = to_seconds(run.spec.autoscaling.pending_timeout)
    for np in run.spec.node_pools:
        pool = run.obs.pools.get(np.name)
        if pool is None or pool.pending_unschedulable <= 0 or pool.unschedulable_since is None:
            continue
        if run.now - pool.unschedulable_since < timeout or np.name in full:
            continue
        full[np.name] = run.now
        stuck = min(pool.pending_unschedulable, run.replicas[np.name] - np.min_replicas)
        if stuck <= 0:
            continue
        run.replicas[np.name] -= stuck
        need = stuck * caps.get(np.name, 0.0)
        moved_to = []
        for q in _cost_order(run, caps):
            if q.name == np.name or q.name in full or need <= 0:
                continue
            k = min(q.max_replicas - run.replicas[q.name], max(1, math.ceil(need / caps[q.name])))
            if k > 0:
                run.replicas[q.name] += k
                need -= k * caps[q.name]
                moved_to.append(f"{q.name}+{k}")
        run.decide(
            "PoolFallback",
            "PodsUnschedulable",
            f"{stuck} pod(s) unschedulable for over {timeout:.0f}s; "
            f"moved to {', '.join(moved_to) or 'no pool with room'}",
            np.name,
            unschedulable=pool.pending_unschedulable,
            movedTo=",".join(moved_to) or "-",
        )


def _plan_replicas(run: _Run, fits: Mapping[str, Fit], state: dict[str, dict[str, float]]) -> None:
    interval = to_seconds(run.spec.autoscaling.interval)
    auto = run.spec.autoscaling
    caps = {np.name: _capacity(run, np, fits) for np in run.spec.node_pools}
    full = {k: v for k, v in state["full"].items() if run.now - v < FULL_HOLD_S}
    _fallback(run, caps, full)
    state["full"] = full
    demands = [_demand(run.obs.pools.get(np.name), interval) for np in run.spec.node_pools if run.replicas[np.name]]
    if any(d is None for d in demands):
        return  # a running pool without data: no replica decision either way
    demand = sum(d for d in demands if d is not None)
    supply = sum(run.replicas[np.name] * caps[np.name] for np in run.spec.node_pools)
    deficit = demand - supply
    if deficit > 1e-9 and _slo_at_risk(run):
        state["slack"].pop("*", None)
        since = state["breach"].setdefault("*", run.now)
        if run.now - since < to_seconds(auto.scale_up_stabilization):
            return
        if _starting(run):
            return  # replicas from an earlier scale-out are still starting: judge them once they serve
        if not _cost_order(run, caps):
            text = "+1 replica: an SLO is missed and the fitted curves show no capacity to size the step"
            _step_out(run, full, state, demand, supply, [], "SLOAtRiskNoModel", text)
            return
        for q in _cost_order(run, caps):
            if deficit <= 1e-9:
                break
            if q.name in full:
                continue
            k = min(q.max_replicas - run.replicas[q.name], math.ceil(deficit / caps[q.name]))
            if k <= 0:
                continue
            run.replicas[q.name] += k
            deficit -= k * caps[q.name]
            state["scaled"][q.name] = run.now
            run.decide(
                "ScaleOut",
                "SLOCapacityShort",
                f"+{k} replica(s): demand {demand:.3g}/s exceeds SLO capacity {supply:.3g}/s",
                q.name,
                demand=_f(demand),
                supply=_f(supply),
                perReplica=_f(caps[q.name]),
                costPerCapacity=_f(q.cost_per_hour / caps[q.name]),
                added=k,
            )
        state["breach"].pop("*", None)
        return
    state["breach"].pop("*", None)
    if _slo_at_risk(run):
        # Observation beats the model: the SLO is missed and no split fixes it, though the fit says
        # capacity suffices (a router skew, an unmodelled prompt mix, a noisy fit).
        since = state["breach"].setdefault("model", run.now)
        doubt = max(to_seconds(auto.scale_up_stabilization), MODEL_DOUBT_INTERVALS * interval)
        if run.now - since >= doubt and not _starting(run):
            state["breach"]["model"] = run.now  # a further replica waits another full doubt window
            _step_out(run, full, state, demand, supply, _cost_order(run, caps), "SLOMissedDespiteModel",
                      f"+1 replica: an SLO stayed missed for {doubt:.0f}s with no split change left, although "
                      f"the fitted SLO capacity {supply:.3g}/s covers demand {demand:.3g}/s")  # fmt: skip
        state["slack"].pop("*", None)
        return
    state["breach"].pop("model", None)
    observed = [run.obs.pools.get(np.name) for np in run.spec.node_pools if run.replicas[np.name]]
    if not all(_has_slack(run, p) for p in observed if p is not None):
        state["slack"].pop("*", None)
        return
    since = state["slack"].setdefault("*", run.now)
    window = to_seconds(auto.scale_down_stabilization)
    if run.now - since < window:
        return
    for q in reversed(_cost_order(run, caps)):
        if run.replicas[q.name] <= q.min_replicas:
            continue
        if supply - caps[q.name] < demand * (1.0 + CAPACITY_MARGIN):
            continue
        run.replicas[q.name] -= 1
        state["scaled"][q.name] = run.now
        state["slack"]["*"] = run.now  # the next removal waits another full window
        run.decide(
            "ScaleIn",
            "SLOSlack",
            f"-1 replica: both SLOs had slack for {window:.0f}s and "
            f"{supply - caps[q.name]:.3g}/s of SLO capacity still covers demand {demand:.3g}/s",
            q.name,
            demand=_f(demand),
            supplyAfter=_f(supply - caps[q.name]),
            perReplica=_f(caps[q.name]),
        )
        return


def _step_out(
    run: _Run,
    full: Mapping[str, float],
    state: dict[str, dict[str, float]],
    demand: float,
    supply: float,
    order: list[NodePool],
    reason: str,
    message: str,
) -> None:
    """One replica into the first pool of `order` with room (by raw cost when `order` is empty), rather
    than a model-sized step the model cannot give; the next evaluations refit with its samples."""
    ranked = order or sorted(run.spec.node_pools, key=lambda np: (np.cost_per_hour, -np.priority, np.name))
    for q in ranked:
        if q.name not in full and run.replicas[q.name] < q.max_replicas:
            run.replicas[q.name] += 1
            state["scaled"][q.name] = run.now
            run.decide("ScaleOut", reason, message, q.name, demand=_f(demand), supply=_f(supply), added=1)
            return


def _starting(run: _Run) -> bool:
    """Some node pool has schedulable replicas that are not Ready yet (an action still in flight)."""
    for np in run.spec.node_pools:
        pool = run.obs.pools.get(np.name)
        if pool is not None and pool.ready + pool.pending_unschedulable < min(run.replicas[np.name], pool.replicas):
            return True
    return False


def _slo_at_risk(run: _Run) -> bool:
    """Some running pod misses an SLO and no split change of this plan is predicted to fix it: the
    model's capacity shortfall alone (which can be a fitting artefact) never adds accelerators."""
    for np in run.spec.node_pools:
        for pod in run.obs.pods_of(np.name):
            if _sample(pod, run.window_s) is None:
                continue  # too little data
            if _awaiting_fix(run, pod.pod):
                continue  # a split change predicted to fix it, whose effect is not measurable yet
            h = _headroom(pod.ttft_p99, pod.itl_p99, run.ttft_slo, run.itl_slo)
            if h is not None and h < 0:
                return True
    return False


def _has_slack(run: _Run, pool: NodePoolObservation) -> bool:
    """Both SLOs met with the capacity margin to spare; an idle pool (zero arrivals) has slack."""
    h = _headroom(pool.ttft_p99, pool.itl_p99, run.ttft_slo, run.itl_slo)
    if h is None:
        return pool.request_rate == 0
    return h >= CAPACITY_MARGIN


def _slo_met(run: _Run) -> tuple[bool | None, str]:
    worst_t = [p.ttft_p99 for p in run.obs.pools.values() if p.ttft_p99 is not None]
    worst_i = [p.itl_p99 for p in run.obs.pools.values() if p.itl_p99 is not None]
    if not worst_t or not worst_i:
        return None, "no latency observed (idle or no data)"
    t, i = max(worst_t), max(worst_i)
    met = t <= run.ttft_slo and i <= run.itl_slo
    return met, f"p99 TTFT {_f(t)}s (SLO {_f(run.ttft_slo)}s), p99 ITL {_f(i)}s (SLO {_f(run.itl_slo)}s)"


def plan(
    spec: InferencePoolSpec,
    obs: Observation,
    state: ControllerState,
    current: Mapping[str, int],
    pools: Mapping[str, PoolContext],
) -> Plan:
    """Decide splits and replicas for one InferencePool. Pure: same inputs, same plan."""
    replicas = {
        np.name: max(np.min_replicas, min(np.max_replicas, current.get(np.name, np.min_replicas)))
        for np in spec.node_pools
    }
    run = _Run(
        spec,
        obs,
        state,
        pools,
        replicas,
        [],
        to_seconds(spec.slo.ttft_p99),
        to_seconds(spec.slo.itl_p99),
        to_seconds(spec.slo.window),
        dict(state.fix_expected),
    )
    interval = to_seconds(spec.autoscaling.interval)
    if not obs.available:
        return _hold(run, "MetricsUnavailable", obs.reason or "the metrics source did not answer")
    if obs.age > STALE_INTERVALS * interval:
        return _hold(run, "MetricsStale", f"newest sample is {obs.age:.0f}s old (> {STALE_INTERVALS:g} intervals)")
    unknown = [
        np.name
        for np in spec.node_pools
        if (p := obs.pools.get(np.name)) is not None and p.ready > 0 and p.request_rate is None
    ]
    met, message = _slo_met(run)
    if spec.autoscaling.mode == AutoscalingMode.OFF:
        return Plan(replicas, (), (), state, True, "AutoscalingOff", "autoscaling.mode is off", met, message)
    fits = _refit_all(run)
    last_change = dict(state.last_split_change)
    splits = [] if unknown else _plan_splits(run, fits, last_change)
    scratch = {
        "slack": dict(state.slack_since),
        "breach": dict(state.breach_since),
        "scaled": dict(state.last_scale),
        "full": dict(state.full_since),
    }
    if spec.autoscaling.mode == AutoscalingMode.EXTERNAL:
        pass  # an HPA or KEDA owns replicas: splits only (the replicas returned are the current ones)
    elif not unknown:
        _plan_replicas(run, fits, scratch)
    else:
        # Scheduling facts do not come from Prometheus: pods stuck unschedulable still hand their
        # demand to the next pool while request metrics are missing (e.g. a new pod's first scrape).
        caps = {np.name: _capacity(run, np, fits) for np in spec.node_pools}
        full = {k: v for k, v in scratch["full"].items() if run.now - v < FULL_HOLD_S}
        _fallback(run, caps, full)
        scratch["full"] = full
    fix_expected = {pod: t for pod, t in run.fix_expected.items() if _awaiting_fix(run, pod)}
    new_state = ControllerState(
        last_change, scratch["slack"], scratch["breach"], scratch["scaled"], scratch["full"], fits, fix_expected
    )
    if unknown:
        reason, text = "NoSamples", f"no request metrics for running node pool(s) {', '.join(unknown)}; holding"
        return Plan(run.replicas, (), tuple(run.decisions), new_state, False, reason, text, met, message)
    return Plan(
        run.replicas,
        tuple(splits),
        tuple(run.decisions),
        new_state,
        True,
        "MetricsFresh",
        f"samples newer than {STALE_INTERVALS:g} evaluation intervals",  # constant: status changes only on change
        met,
        message,
    )


def _hold(run: _Run, reason: str, message: str) -> Plan:
    met, slo_message = _slo_met(run) if run.obs.available else (None, "no observation")
    return Plan(
        run.replicas, (), (), run.state, False, reason, f"{message}; holding splits and replicas", met, slo_message
    )
