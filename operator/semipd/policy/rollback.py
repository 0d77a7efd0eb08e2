"""Undo a split move that broke ITL: a standby swap that took decode share away goes back to the split
it left as soon as the pod's recent window (PodObservation.itl_p99_recent) shows p99 ITL over the SLO,
without waiting for the pod's settled window, and the split is recorded as broken (policy.evidence).
"""

from __future__ import annotations

from semipd.policy.context import Run, fmt
from semipd.policy.evidence import ItlReading, decode_share, less_decode, updated
from semipd.policy.state import Prediction, SplitChange


def undo_broken_moves(
    run: Run, pool: str, split_cost_s: float, predictions: dict[str, Prediction]
) -> dict[str, SplitChange]:
    """Standby swaps that took decode share away and broke ITL in the recent window go back at once,
    before the pod's settled window: a breach fails every request decoded in the node pool's window, and
    waiting for the window let one canary break two (the azure-conv day at TTFT 2 s, peak 11 req/s:
    97.4 % vs 98.9 %). The split is recorded as broken at this rate (policy.evidence)."""
    undone = {}
    for pod in sorted(run.obs.pods_of(pool), key=lambda p: p.pod):
        pred = predictions.get(pod.pod)
        recent = pod.itl_p99_recent
        if pred is None or pred.previous is None or recent is None or recent <= run.itl_slo:
            continue
        split = (pred.prefill_percent, pred.decode_percent)
        if (pod.prefill_percent, pod.decode_percent) != split or not run.settling(pod.pod):
            continue  # moved again since, or settled (the window's own verdict takes over)
        if run.obs.recent_window_s <= 0 or run.now - pred.time < run.obs.recent_window_s + split_cost_s:
            continue  # the recent window still holds the old split or the switch
        if not less_decode(split, pred.previous):
            continue  # decode lost no share: the move did not cause it
        back = pred.previous
        undone[pod.pod] = SplitChange(pod.pod, pool, back[0], back[1], split)
        del predictions[pod.pod]
        run.fix_expected.pop(pod.pod, None)
        rate = pod.request_rate if pod.request_rate is not None else pred.rate
        breach = ItlReading(run.now, decode_share(split), rate, split[1], clean=False)
        run.evidence[pool] = updated(run.evidence.get(pool, ()), [breach], run.now, run.window_s)
        run.decide("SplitChange", "ITLBrokeAfterMove",
                   f"prefill {split[0]}% -> {back[0]}%, decode {split[1]}% -> {back[1]}%: p99 ITL over the last "
                   f"{run.obs.recent_window_s:.0f}s {fmt(recent)}s > SLO {fmt(run.itl_slo)}s since this pod's "
                   "decode share came down", pool, pod.pod, observedITLRecent=fmt(recent),
                   switchMode="standby")  # fmt: skip
    return undone
