"""How the prefill and decode workers share one device's compute while both run kernels.

The performance model's contention term: from the two workers' configured compute shares to the
shares each effectively gets while the other is busy. Sources and estimates: docs/latency-model.md.
"""

from __future__ import annotations


def contended_shares(prefill_share: float, decode_share: float) -> tuple[float, float]:
    """Effective (prefill, decode) shares while both workers run kernels at the same time.

    MPS caps each process at its percentage; when the caps sum past the whole device the two
    processes split the SMs in proportion to their caps (Semi-PD evaluates its fits on the same
    normalised shares x/(x+y), y/(x+y)). Caps that fit side by side are granted as they are.
    """
    total = prefill_share + decode_share
    if total <= 1.0:
        return prefill_share, decode_share
    return prefill_share / total, decode_share / total
