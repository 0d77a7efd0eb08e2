"""Per-expert routing shares of a synthetic MoE layer (pure): who receives how many of a token's k picks.

Each MoE layer ranks its experts by a seeded random permutation and weights rank r by 1/(r+1)^skew
(Zipf; skew 0 is uniform). A token picks `k` distinct experts, so no expert can receive more than
one of a token's k picks: the per-token hit probability q_e = min(1, c * w_e) is water-filled so
that sum(q_e) = k. Shared by the simulated engine (its counters) and the placement policy's tests.
"""

from __future__ import annotations

import random
from collections.abc import Sequence


def zipf_weights(experts: int, skew: float, rng: random.Random) -> list[float]:
    ranks = list(range(experts))
    rng.shuffle(ranks)
    return [1.0 / (rank + 1) ** skew for rank in ranks]


def topk_hit_probabilities(weights: Sequence[float], k: int) -> list[float]:
    """q_e = min(1, c * w_e) with sum(q) == k (capped experts are hit by every token)."""
    n = len(weights)
    if not 0 < k <= n:
        raise ValueError(f"k={k} must be in 1..{n}")
    if any(w <= 0 for w in weights):
        raise ValueError("weights must be positive")
    capped: set[int] = set()
    while True:
        free = [i for i in range(n) if i not in capped]
        budget = k - len(capped)
        if budget == 0 or not free:
            return [1.0 if i in capped else 0.0 for i in range(n)]
        total = sum(weights[i] for i in free)
        c = budget / total
        newly = {i for i in free if c * weights[i] >= 1.0}
        if not newly:
            return [1.0 if i in capped else c * weights[i] for i in range(n)]
        capped |= newly


def layer_hit_probabilities(layers: int, experts: int, k: int, skew: float, seed: int) -> list[list[float]]:
    out = []
    for layer in range(layers):
        rng = random.Random(seed * 1_000_003 + layer)
        out.append(topk_hit_probabilities(zipf_weights(experts, skew, rng), k))
    return out
