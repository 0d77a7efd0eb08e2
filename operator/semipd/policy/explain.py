"""The decisions that explain the split planner to an operator without steering it.

- SplitOutcome: a settled split change's prediction next to what the pod then showed (once per change).
- SplitHeld with a pod-level reason (HOLD_TEXT): why pods that miss an SLO keep their split, with the
  numbers behind it (how many splits the ITL evidence refused, the best allowed move, its gain and
  cost). A hold lasts as long as the miss, and every decision is a Kubernetes Event and one of the 20
  entries of status.decisions, so a pod's hold is reported when its reason changes and repeated only
  after HOLD_REPEAT_WINDOWS; pods held for one reason in one evaluation share one decision.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from semipd.api.status import DETAIL_MAX_LENGTH
from semipd.policy.context import Hold, Run, fmt, sample_of
from semipd.policy.estimator import SATURATED_S
from semipd.policy.state import POD_LIST, Prediction

HOLD_TEXT = {
    "BestAllowedSplit": "the split it runs is the best one the ITL constraint and the ITL evidence allow (the "
    "most prefill share under contention; with ITL over the SLO, the least predicted ITL)",
    "NoITLFix": "its ITL is over the SLO, and no allowed split is predicted to lower it",
    "ITLDefenceNotWorth": "its measured ITL is near the SLO, so only more decode share may be taken, and "
    "that move would cost TTFT more than a breach (or take the pod out for a restart)",
    "GainBelowCost": "the best allowed split is predicted to cut p99 TTFT by less than 10 % and to gain "
    "fewer requests than its switch exposes",
    "RestartAwaitsSteadyLoad": "the arrival rate is rising, and a restart would take the pod out when its "
    "capacity is needed most; restart-mode TTFT fixes and discretionary moves wait for a steady load",
}
"""Reason -> what it means, for the SplitHeld message."""

REFUSAL_DETAIL = {
    "broken": "refusedBrokenOrTight",
    "untrusted": "refusedUntrusted",
    "unmeasured": "refusedUnmeasured",
    "nearSLONoLessDecode": "refusedNearSLONoLessDecode",
}
"""Why the planner refused candidate splits (evidence.Verdicts.refusal, and the planner's own rules) ->
the SplitHeld detail that counts them: a split that ran ITL tight or broke it at this rate, one more than
a grid step below the decode shares measured clean, one below them while a canary is out, and less
decode share for a pod whose measured ITL is near the SLO."""
HOLD_REPEAT_WINDOWS = 10.0
"""A pod's hold is reported again for the same reason only after this many SLO windows."""


def report_outcomes(run: Run, predictions: dict[str, Prediction]) -> None:
    """Compare each settled split change's prediction with what the pod now shows (once)."""
    for pod in sorted(run.obs.pods, key=lambda p: p.pod):
        pred = predictions.get(pod.pod)
        if pred is None or run.settling(pod.pod):
            continue
        sample = sample_of(pod, run.window_s)
        if sample is None:
            continue
        del predictions[pod.pod]
        run.decide(
            "SplitOutcome",
            "PredictionChecked",
            f"prefill {pred.prefill_percent}%, decode {pred.decode_percent}%: predicted p99 TTFT "
            f"{fmt(shown(pred.ttft))}s / ITL {fmt(pred.itl)}s, "
            f"observed {fmt(sample.ttft)}s / {fmt(pod.itl_p99 or math.nan)}s",
            pod.node_pool,
            pod.pod,
            predictedTTFT=fmt(shown(pred.ttft)),
            observedTTFT=fmt(sample.ttft),
            predictedITL=fmt(pred.itl),
            observedITL=fmt(pod.itl_p99 or math.nan),
            predictedRate=fmt(pred.rate),
            observedRate=fmt(sample.rate),
        )
    for name in [p for p, pred in predictions.items() if run.now - pred.time > 10.0 * run.window_s]:
        del predictions[name]  # the pod is gone or never showed a settled window


def shown(ttft: float) -> float:
    """A saturated prediction (the queue grows without bound) is shown as inf, not the finite stand-in
    that only keeps the ranking monotone."""
    return math.inf if ttft >= SATURATED_S else ttft


def report_holds(run: Run, pool: str, moved: Iterable[str]) -> None:
    """SplitHeld decisions for the node pool's pods that miss an SLO and keep their split this evaluation
    (run.holds, filled by the split planner), each pod once per reason (HOLD_REPEAT_WINDOWS)."""
    moving = set(moved)
    groups: dict[str, list[tuple[str, Hold]]] = {}
    for pod in sorted(run.obs.pods_of(pool), key=lambda p: p.pod):
        if pod.pod in moving:
            run.held.pop(pod.pod, None)  # a hold after this move is news
            continue
        hold = run.holds.get(pod.pod)
        last = run.held.get(pod.pod)
        if hold is None or (last is not None and last[0] == hold.reason
                            and run.now - last[1] < HOLD_REPEAT_WINDOWS * run.window_s):  # fmt: skip
            continue
        run.held[pod.pod] = (hold.reason, run.now)
        groups.setdefault(hold.reason, []).append((pod.pod, hold))
    for reason, pods in groups.items():
        for held in _chunks(pods):
            _report(run, pool, reason, held)


def _chunks(held: list[tuple[str, Hold]]) -> Iterable[list[tuple[str, Hold]]]:
    """Runs of pods whose names, joined, fit one status detail (DETAIL_MAX_LENGTH)."""
    out: list[tuple[str, Hold]] = []
    width = 0
    for item in held:
        if out and width + len(POD_LIST) + len(item[0]) > DETAIL_MAX_LENGTH:
            yield out
            out, width = [], 0
        width += (len(POD_LIST) if out else 0) + len(item[0])
        out.append(item)
    if out:
        yield out


def _report(run: Run, pool: str, reason: str, held: list[tuple[str, Hold]]) -> None:
    names = POD_LIST.join(name for name, _ in held)
    # One decision per reason, with the numbers of the pod furthest over the TTFT SLO: per-pod
    # decisions would fill status.decisions with one burst's holds.
    worst_name, worst = max(held, key=lambda t: float(t[1].details.get("observedTTFT", "0")))
    message = f"{names}: {HOLD_TEXT[reason]}" + (f" (numbers: {worst_name})" if len(held) > 1 else "")
    only = held[0][0] if len(held) == 1 else None
    run.decide("SplitHeld", reason, message, pool, only, pods=names, **worst.details)
