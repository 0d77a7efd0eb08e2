"""Synthetic per-expert loads for tests and benchmarks (pure, seeded).

No public trace has per-expert routing, so loads follow the simulated engine's model exactly:
per layer a seeded Zipf popularity over experts, top-k feasible hit probabilities
(semipd.sim.engine.experts), then a multinomial draw of `tokens * k` expert picks so counts carry
sampling noise like a real recording window.
"""

from __future__ import annotations

import numpy as np

from semipd.perf.moe import layer_hit_probabilities
from semipd.policy.experts.layout import FloatArray


def zipf_load(layers: int, experts: int, k: int, skew: float, tokens: int, seed: int) -> FloatArray:
    """[layers, experts] token counts of `tokens` tokens routed top-k under Zipf(skew) popularity."""
    rng = np.random.default_rng(seed)
    hits = np.array(layer_hit_probabilities(layers, experts, k, skew, seed))
    counts: FloatArray = np.array([rng.multinomial(tokens * k, row / row.sum()) for row in hits], dtype=np.float64)
    return counts


def zipf_suite(n: int, layers: int, experts: int, k: int, seed: int = 0) -> list[tuple[float, FloatArray]]:
    """`n` loads with skew drawn uniformly from [0.6, 1.4] and 2k..50k tokens: (skew, weight) pairs."""
    rng = np.random.default_rng(seed)
    suite = []
    for i in range(n):
        skew = float(rng.uniform(0.6, 1.4))
        tokens = int(rng.integers(2_000, 50_000))
        suite.append((skew, zipf_load(layers, experts, k, skew, tokens, seed=seed * 100_003 + i)))
    return suite
