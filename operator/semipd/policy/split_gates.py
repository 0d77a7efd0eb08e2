"""The gates a node pool's split proposals pass before they become changes: at most one canary (a move
below the decode shares measured to meet ITL) per node pool at a time, besides pods whose requests
already miss TTFT, and in restart mode one pod at a time, only with no backlog and while the others
carry its load at no more than RESTART_UTILIZATION of their capacity. `restart_cost` prices what a
restart costs the others; `restart_fixes_ttft` and `itl_fix_allowed` say which fixes are worth a
restart, or any switch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from semipd.policy.context import CAPACITY_MARGIN, Run, fmt, sample_of
from semipd.policy.estimator import Estimator, backlogged
from semipd.policy.observation import PodObservation
from semipd.policy.state import Prediction


@dataclass(frozen=True)
class Proposal:
    """One pod's best split move, as the gates weigh it."""

    pod: PodObservation
    split: tuple[int, int]
    urgent: bool
    """The current split breaks the ITL constraint or misses TTFT: cost does not gate it."""
    gain: float
    """Predicted requests gained over the hold time, net of the switch's cost."""
    reason: str
    details: Mapping[str, str]
    prediction: Prediction
    fixes: bool
    canary: bool
    """The new split has less decode share than any measured to meet ITL at this rate."""
    attainment: float = 1.0
    """Predicted TTFT attainment at the current split (what an ITL breach could still cost)."""


GATE_HOLDS = frozenset({"CanaryInProgress", "RestartInProgress", "RestartNeedsCapacity"})
"""SplitHeld reasons of the gates here: re-decided every evaluation while the gate holds (a restart
holds for minutes), so their publication is thinned (controller.view.AutoscaleView.publishes)."""

LOST_TTFT = 0.5
"""An urgent canary whose pod is predicted to meet TTFT for less than this fraction of its requests
at its current split passes the gate while another canary is in flight: a broken ITL window can cost
it only the requests that still meet TTFT, fewer than the fix saves. The fleet starts at the API's
(100, 50); on Mooncake at 4 req/s (paper ITL) its p99 TTFT reached 10-19 s while four pods waited a
window behind the first canary (89.1 % vs 93.0 %; static (100, 40) 91.3 %) (estimate)."""


RESTART_UTILIZATION = 0.5
"""A restart-mode change passes only while the node pool's other Ready pods, carrying the drained pod's
arrivals too, would run at no more than this fraction of their prefill capacity (the rate at which the
queue stops draining). Queueing delay grows as 1 / (1 - utilization): at 0.5 it at most doubles, at the
old bound (0.9, the capacity margin) it grows tenfold. Fair judge, restart mode, 18 runs at both ITL
scales: at 0.9 ours scored 14.34 in sum where never moving (static (100, 50)) scored 15.31; at 0.5
(with restart_cost and no speculative restarts) 15.07; at a third 15.31, but that bound never lets a
3-pod pool at a far too small prefill share restart under a steady load it could carry (estimate)."""


RESTART_GAIN_MARGIN = 1.5
"""A restart must promise this multiple of its cost: the gain is a prediction over the hold time at the
projected rate, and a burst may be gone when the pod is back, while the cost is paid for sure (fair
judge, restart mode, 18 runs: 15.29 at 1, 15.31 at 1.5 and 2, where never moving also scores 15.31;
moves on mix-shift 5 req/s, paper ITL, promising 1.05-1.15 x their cost lost 0.9 points) (estimate)."""
CALM_RESTART_LOSS = 1.0
"""A restart that fixes a missed TTFT needs no predicted gain over its cost while the other pods are
predicted to lose fewer than this many requests' TTFT carrying its load, and it is predicted to clear
the miss with the capacity margin: a persistent p99 miss in a calm pool is worth fixing even where the
hold time's gain is small (4 pods at prefill 30 % with p99 TTFT 0.52-0.60 s of a 0.5 s SLO, predicted
0.17-0.23 s after, never moved otherwise). Near the knee the fix must pay for itself (estimate)."""


def restart_fixes_ttft(gain: float, cost: float, others_lose: float, new_ttft: float, ttft_slo: float) -> bool:
    """A restart-mode move that fixes a missed TTFT (cutting its predicted p99 by TTFT_FIX) is worth its
    restart: it pays for itself, or the pool is calm (CALM_RESTART_LOSS) and the move's predicted p99
    (`new_ttft`) clears the miss with the capacity margin. Without that last condition, moves predicted
    to cut p99 TTFT by 15-16 % but leave it near the SLO restarted into a burst and lost what never
    moving kept (fair judge, restart mode, azure-code 3 req/s paper ITL: 91.0 % vs 94.8 %; the others,
    as the model saw them, lost under one request)."""
    calm = others_lose < CALM_RESTART_LOSS and new_ttft <= (1.0 - CAPACITY_MARGIN) * ttft_slo
    return gain > cost or calm


def itl_fix_allowed(est: Estimator, current: tuple[int, int], rate: float, worst_ttft: float, restart: bool,
                    split: tuple[int, int]) -> bool:  # fmt: skip
    """Whether a pod breaking ITL may move to `split` (predicted to meet it) at the projected `rate`:
    - never to a split whose prefill saturates at that rate, unless it has no less prefill capacity than
      the current one: the queue then grows without bound and every request misses TTFT (fair judge,
      restart mode, Mooncake 4 req/s tight ITL: one pod reading 69 ms went (100, 50) -> (30, 80),
      predicted TTFT attainment 0.48 -> 0, and served 2 of 202 requests in the next window; 53.5 % vs
      74.0 % never moving; standby swap, 80 seeded mix-shift runs: +0.08 in sum, no run worse);
    - in restart mode, never to one predicted worse for TTFT than `worst_ttft` (today's p99 or the SLO):
      the restart takes the pod out, and its decode load raises the others' ITL until it is back, so a
      fix that also costs TTFT loses on both counts (mix-shift 4 req/s, tight ITL, decode x1.3: two
      restarts to (60, 100) and (50, 100) broke the next window where never moving recovered it, 74.9 %
      vs 84.5 %; probe over 80 seeded runs: +0.24 in sum, one run -10 points, three +10)."""
    saturates = est.saturation_rate(*split)
    if saturates <= rate and saturates < est.saturation_rate(*current):
        return False
    return not restart or est.ttft(*split, rate) <= worst_ttft


def _priority(p: Proposal) -> tuple[bool, float, str]:
    """The order in which a gate admits proposals: urgent first, then the largest net gain (then name)."""
    return not p.urgent, -p.gain, p.pod.pod


def pod_capacity(est: Estimator, pod: PodObservation) -> float:
    """Arrivals/s one pod can serve without its prefill queue growing: what "the load needs" is judged
    against (RESTART_UTILIZATION of it). (The SLO capacity is no use here: a p99 TTFT missed at light
    load from long prompts, not queueing, reads as no capacity at all.)"""
    split = (int(pod.prefill_percent or 0), int(pod.decode_percent or 0))
    return est.saturation_rate(*split) if split[0] > 0 and split[1] > 0 else 0.0


def canary_gate(run: Run, pool: str, proposals: list[Proposal], retry: Callable[[PodObservation], Proposal | None]
                 ) -> list[Proposal]:  # fmt: skip
    """At most one pod per node pool moves below the decode shares measured to meet ITL while the last
    such move has not yet shown a settled window, besides urgent ones that have lost TTFT already
    (LOST_TTFT); the others take their best measured-share move."""
    last = run.state.canary.get(pool, -math.inf)
    # Its first settled window starts once the switch is done: a restart takes the pod out for its
    # whole start-up (with the window alone, a second restart-mode canary at decode 30 % on mix-shift
    # 4/s followed the first before it was measured, and both broke ITL: 73.7 % vs 92.8 %).
    busy = run.now - last < run.pools[pool].split_cost_s + run.window_s + run.interval_s
    out, held = [], []
    for p in sorted(proposals, key=_priority):
        if not p.canary:
            out.append(p)
        elif not busy:
            out.append(p)
            busy = True
            run.canary[pool] = run.now
        elif p.urgent and p.attainment < LOST_TTFT:
            out.append(p)  # its requests miss TTFT already: a broken ITL window costs it little
        else:
            held.append(p.pod.pod)
            if (instead := retry(p.pod)) is not None:
                out.append(instead)
    if held:
        run.decide("SplitHeld", "CanaryInProgress", f"{', '.join(held)}: no less decode share until one pod's "
                   "window shows ITL below the shares measured to meet it", pool)  # fmt: skip
    return sorted(out, key=lambda p: p.pod.pod)


def restart_gate(run: Run, pool: str, est: Estimator, proposals: list[Proposal]) -> list[Proposal]:
    """Restart mode: one pod per node pool at a time, and only while the others carry the load."""
    if not proposals:
        return []
    pool_obs = run.obs.pools.get(pool)
    ctx = run.pools[pool]
    last = run.restarted.get(pool, -math.inf)
    if pool_obs is None or pool_obs.ready < pool_obs.replicas or run.now - last < ctx.split_cost_s:
        run.decide("SplitHeld", "RestartInProgress", "a pod of this node pool is restarting or starting; "
                   "restart-mode split changes go one pod at a time", pool)  # fmt: skip
        return []
    backlog, rate = pool_obs.queued or 0.0, pool_obs.request_rate or 0.0
    if backlogged(backlog, rate):
        # More than a second of arrivals waits: the pool does not keep up now, whatever the model's
        # capacity says (on Mooncake 4 req/s its fitted l100 promised 2.5 times the load; a restart at a
        # 13-request backlog cost 272 requests' TTFT over the next four windows against never moving).
        run.decide("SplitHeld", "RestartNeedsCapacity",
                   f"{backlog:.3g} requests wait in this node pool, more than a second of arrivals: a restart "
                   "would deepen the backlog", pool, queued=fmt(backlog))  # fmt: skip
        return []
    demand = rate + backlog / max(run.interval_s, 1.0)
    pods = {p.pod: p for p in run.obs.pods_of(pool) if p.ready}
    caps = {name: pod_capacity(est, p) for name, p in sorted(pods.items())}
    ranked = sorted(proposals, key=_priority)
    for p in ranked:
        rest = sum(c for name, c in caps.items() if name != p.pod.pod)
        if _carries(rest, demand):
            return [p]
    p = ranked[0]
    rest = sum(c for name, c in caps.items() if name != p.pod.pod)
    run.decide("SplitHeld", "RestartNeedsCapacity",
                   f"restarting {p.pod.pod} would leave {rest:.3g}/s of capacity for {demand:.3g}/s of demand "
                   f"(at most {RESTART_UTILIZATION:.0%} of the rest's capacity)",
                   pool, p.pod.pod, capacityWithout=fmt(rest), demand=fmt(demand))  # fmt: skip
    return []


def _carries(capacity: float, demand: float) -> bool:
    """The other pods' capacity carries `demand` within RESTART_UTILIZATION."""
    return demand <= capacity * RESTART_UTILIZATION


def restart_cost(run: Run, est: Estimator, pod: PodObservation, rate_factor: float) -> float:
    """Requests predicted to miss TTFT at the node pool's other Ready pods while `pod` restarts: they take
    its arrivals, each at its own split and pinned to its own window (their rates times `rate_factor`,
    the projected growth). Halving the pod's own arrivals, the cost had been blind to the pool: on
    azure-conv 24 req/s at the paper ITL, restarts priced so scored 81.6 % where never moving scored
    88.3 %. With no other Ready pod there is none to price: restart_gate holds that restart."""
    others = [o for o in run.obs.pods_of(pod.node_pool) if o.ready and o.pod != pod.pod]
    if not others:
        return 0.0
    share = (len(others) + 1) / len(others)
    lost = 0.0
    for sample in (sample_of(o, run.window_s) for o in others):
        if sample is None or sample.split is None:
            continue  # idle or unknown: it has room
        pinned, rate = est.pinned(sample, itl=False), sample.rate * rate_factor
        before = pinned.ttft_attainment(*sample.split, rate, run.ttft_slo)
        after = pinned.ttft_attainment(*sample.split, rate * share, run.ttft_slo)
        lost += max(0.0, before - after) * rate * share
    return lost * run.pools[pod.node_pool].split_cost_s
