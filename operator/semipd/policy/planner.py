"""`plan()`: the SLO autoscaler as one pure, deterministic function of (spec, observation, state).

Order of levers (architecture.md, "Control loop"):
1. split first (policy.splits): per pod, jump to the (prefill, decode) shares that maximise the
   predicted TTFT attainment with ITL as a hard constraint, when the gain beats the switch's cost;
   seconds, no new accelerators; restart-mode engines one pod at a time per node pool;
2. replicas second (policy.replicas): when no split gives the fleet enough SLO capacity for the
   observed demand, add the replicas the fitted model says are missing; remove one only after both
   SLOs had slack for the stabilization window and the model says the rest still meets the SLO;
3. the cheapest pool with room third: new capacity goes where cost per unit of SLO capacity is
   lowest; pods left unschedulable past the timeout move their demand to the next pool.
Unknown or stale metrics hold everything (fail-static).
"""

from __future__ import annotations

from collections.abc import Mapping

from semipd.api.durations import to_seconds
from semipd.api.v1alpha1 import AutoscalingMode, InferencePoolSpec
from semipd.policy.context import CAPACITY_MARGIN, PoolContext, Run, fmt, load_rising, sample_of
from semipd.policy.estimator import Fit, refit
from semipd.policy.observation import Observation
from semipd.policy.replicas import FULL_HOLD_S, capacity, fallback, plan_replicas
from semipd.policy.splits import plan_splits
from semipd.policy.state import ControllerState, Plan

__all__ = ["CAPACITY_MARGIN", "PoolContext", "plan"]

STALE_INTERVALS = 3.0
"""Observations older than this many evaluation intervals are stale."""


def _per_token(total: float | None, rate: float | None) -> float | None:
    if total is None or rate is None or rate <= 0:
        return None
    return total / rate


def _refit_all(run: Run) -> dict[str, Fit]:
    fits = dict(run.state.fits)
    for np in run.spec.node_pools:
        fit = fits.get(np.name, Fit())
        pool_obs = run.obs.pools.get(np.name)
        prompt = _per_token(pool_obs.prompt_tokens_rate, pool_obs.request_rate) if pool_obs else None
        output = _per_token(pool_obs.generation_tokens_rate, pool_obs.request_rate) if pool_obs else None
        changed = False
        for pod in sorted(run.obs.pods_of(np.name), key=lambda p: p.pod):
            sample = sample_of(pod, run.window_s)
            if sample is not None and not run.settling(pod.pod) and not load_rising(pod):
                fit = fit.observe(sample, prompt, output)
                changed = True
        fits[np.name] = refit(run.pools[np.name].model, fit) if changed else fit
    return fits


def _rates(obs: Observation, spec: InferencePoolSpec) -> dict[str, float]:
    out = {}
    for np in spec.node_pools:
        pool = obs.pools.get(np.name)
        if pool is not None and pool.request_rate is not None and pool.ready > 0:
            out[np.name] = pool.request_rate / pool.ready
    return out


def _slo_met(run: Run) -> tuple[bool | None, str]:
    worst_t = [p.ttft_p99 for p in run.obs.pools.values() if p.ttft_p99 is not None]
    worst_i = [p.itl_p99 for p in run.obs.pools.values() if p.itl_p99 is not None]
    if not worst_t or not worst_i:
        return None, "no latency observed (idle or no data)"
    t, i = max(worst_t), max(worst_i)
    met = t <= run.ttft_slo and i <= run.itl_slo
    return met, f"p99 TTFT {fmt(t)}s (SLO {fmt(run.ttft_slo)}s), p99 ITL {fmt(i)}s (SLO {fmt(run.itl_slo)}s)"


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
    interval = to_seconds(spec.autoscaling.interval)
    run = Run(
        spec,
        obs,
        state,
        pools,
        replicas,
        [],
        to_seconds(spec.slo.ttft_p99),
        to_seconds(spec.slo.itl_p99),
        to_seconds(spec.slo.window),
        interval,
        dict(state.fix_expected),
        _rates(obs, spec),
        dict(state.restarted),
        {p.pod: state.first_seen.get(p.pod, obs.time) for p in obs.pods if p.ready},
        held={p.pod: state.held[p.pod] for p in obs.pods if p.pod in state.held},
    )
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
    predictions = dict(state.predictions)
    splits = [] if unknown else plan_splits(run, fits, last_change, predictions)
    scratch = {
        "slack": dict(state.slack_since),
        "breach": dict(state.breach_since),
        "scaled": dict(state.last_scale),
        "full": dict(state.full_since),
    }
    if spec.autoscaling.mode == AutoscalingMode.EXTERNAL:
        pass  # an HPA or KEDA owns replicas: splits only (the replicas returned are the current ones)
    elif not unknown:
        plan_replicas(run, fits, scratch, splits)
    else:
        # Scheduling facts do not come from Prometheus: pods stuck unschedulable still hand their
        # demand to the next pool while request metrics are missing (e.g. a new pod's first scrape).
        caps = {np.name: capacity(run, np, fits) for np in spec.node_pools}
        full = {k: v for k, v in scratch["full"].items() if run.now - v < FULL_HOLD_S}
        fallback(run, caps, full)
        scratch["full"] = full
    fix_expected = {pod: t for pod, t in run.fix_expected.items() if run.awaiting_fix(pod)}
    rates = {**state.rates, **{name: (obs.time, r) for name, r in run.rates.items()}}
    new_state = ControllerState(
        last_change,
        scratch["slack"],
        scratch["breach"],
        scratch["scaled"],
        scratch["full"],
        fits,
        fix_expected,
        rates,
        run.restarted,
        run.first_seen,
        predictions,
        {**state.itl_evidence, **run.evidence},
        {**state.canary, **run.canary},
        run.held,
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


def _hold(run: Run, reason: str, message: str) -> Plan:
    met, slo_message = _slo_met(run) if run.obs.available else (None, "no observation")
    return Plan(
        run.replicas, (), (), run.state, False, reason, f"{message}; holding splits and replicas", met, slo_message
    )
