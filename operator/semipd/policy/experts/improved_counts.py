"""Improved expert placement, phase 1: replica counts per expert by several rules, and the cheap
forecast that picks which count vectors to pack and search (more per row for small problems).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from semipd.policy.experts.layout import FloatArray, IntArray

GainRule = Callable[[FloatArray, FloatArray], FloatArray]

CANDIDATE_BUDGET = 32_768
"""Slot-rows (rows x slots x candidates) packed and searched per call: 1 candidate at 61 x 320."""
MAX_CANDIDATES = 64
FORECAST_POOL = 7
"""Count vectors forecast per row even when only one is searched."""
NOISE_SPREADS = (0.1, 0.3, 0.6, 1.0)
RULE_ORDER: tuple[tuple[str, float], ...] = (
    ("peak", 0.0),
    ("marginal", 0.0),
    ("capped", 0.6),
    ("capped", 0.7),
    ("frozen", 0.7),
    ("frozen", 0.8),
    ("frozen", 0.9),
    ("capped", 0.5),
    ("capped", 0.8),
    ("capped", 0.9),
    ("capped", 1.0),
    ("frozen", 0.5),
    ("frozen", 0.6),
    ("frozen", 1.0),
)
"""Replica-count rules and their theta (largest piece over the mean device load), most useful first."""


def _peak_rule(w: FloatArray, c: FloatArray) -> FloatArray:
    return w / c


def _marginal_rule(w: FloatArray, c: FloatArray) -> FloatArray:
    return w / (c * (c + 1.0))


def replica_counts(w: FloatArray, num_slots: int, cap: int, rule: GainRule) -> FloatArray:
    """One replica each, then every extra slot to the expert with the largest `rule` score (<= cap each).

    Both rules score an expert's first extra replica by a value increasing in its load, so only the
    `extra` heaviest experts can receive one: the greedy runs on those columns alone.
    """
    rows, experts = w.shape
    extra = num_slots - experts
    if extra < 0 or num_slots > experts * cap:
        raise ValueError(f"{num_slots} slots cannot hold {experts} experts with at most {cap} replicas each")
    counts = np.ones((rows, experts))
    if extra == 0:
        return counts
    k = min(experts, extra)
    top = np.sort(np.argpartition(-w, k - 1, axis=1)[:, :k], axis=1) if k < experts else np.arange(experts)[None]
    top = np.broadcast_to(top, (rows, k))
    sub_w = np.take_along_axis(w, top, axis=1)
    sub_c = np.ones((rows, k))
    score = rule(sub_w, sub_c)
    row = np.arange(rows)
    for _ in range(extra):
        j = np.argmax(score, axis=1)
        c = sub_c[row, j] + 1.0
        sub_c[row, j] = c
        score[row, j] = np.where(c < cap, rule(sub_w[row, j], c), -np.inf)
    np.put_along_axis(counts, top, sub_c, axis=1)
    return counts


def capped_counts(
    w: FloatArray, num_slots: int, cap: int, num_devices: int, thetas: FloatArray, *, frozen: bool = False
) -> FloatArray:
    """Replica counts [thetas * rows, experts]: just enough replicas that no piece exceeds theta x the
    mean device load, then the remaining slots by marginal gain -- or, when `frozen`, by the peak
    rule among the experts that needed no extra replica. A row whose floor needs more slots than it
    has takes the peak rule instead.

    A big piece leaves room only for small ones beside it. The peak rule spends every spare slot on
    making the hot pieces a little smaller; these rules keep at most about one big piece per device
    and split medium experts into fillers instead.
    """
    rows = w.shape[0]
    mean = w.sum(axis=1, keepdims=True) / num_devices
    limit = np.repeat(thetas, rows)[:, None] * np.tile(mean, (thetas.size, 1))
    big = np.tile(w, (thetas.size, 1))
    floor = np.where(limit > 0, np.ceil(big / np.where(limit > 0, limit, 1.0)), 1.0)
    counts = np.clip(floor, 1.0, cap)
    left = num_slots - counts.sum(axis=1)
    over = left < 0
    counts[over] = np.tile(replica_counts(w, num_slots, cap, _peak_rule), (thetas.size, 1))[over]
    left[over] = 0
    limits = np.full_like(counts, float(cap))
    rule = _marginal_rule
    if frozen:
        rule = _peak_rule
        limits = np.where(counts >= 2, counts, limits)
        # Rows where the frozen experts leave too little room grow them after all.
        short = limits.sum(axis=1) - counts.sum(axis=1) < left
        limits[short] = cap
    score = np.where(counts < limits, rule(big, counts), -np.inf)
    row = np.arange(counts.shape[0])
    for _ in range(int(left.max(initial=0))):
        live = row[left > 0]
        j = np.argmax(score[live], axis=1)
        c = counts[live, j] + 1.0
        counts[live, j] = c
        score[live, j] = np.where(c < limits[live, j], rule(big[live, j], c), -np.inf)
        left[live] -= 1
    return counts


def rounds_peak(w: FloatArray, counts: FloatArray, num_devices: int, per_device: int) -> FloatArray:
    """Busiest device [rows] after round-by-round packing, ignoring anti-affinity: a cheap forecast
    of how well a count vector will pack, used to choose which candidates to search."""
    size = w / counts
    sizes = np.take_along_axis(size, _expand(size, counts), axis=1)
    loads = sizes[:, :num_devices].copy()
    row = np.arange(w.shape[0])[:, None]
    for band in range(1, per_device):
        order = np.argsort(loads, axis=1, kind="stable")
        loads[row, order] += sizes[:, band * num_devices : (band + 1) * num_devices]
    peak: FloatArray = loads.max(axis=1)
    return peak


def _count_candidates(w: FloatArray, num_devices: int, per_device: int, budget: int) -> tuple[FloatArray, IntArray]:
    """Candidate replica counts to pack and search: (counts [K, experts], row of each [K]).

    The rules come in order of how often they win on skewed loads (RULE_ORDER), then noisy variants
    of the peak and marginal rules (loads scaled by a fixed pseudo-random factor per expert), which
    explore count vectors near the rules'. Each row keeps as many as `budget` slot-rows allow (one
    at 61 x 320 with CANDIDATE_BUDGET), those with the best rounds_peak forecast.
    """
    rows, experts = w.shape
    num_slots = num_devices * per_device
    cap = num_devices
    keep = max(1, min(MAX_CANDIDATES, budget // (rows * num_slots)))
    pool = max(keep, FORECAST_POOL)
    chosen_rules = RULE_ORDER[:pool]
    cands: dict[tuple[str, float], FloatArray] = {}
    for kind, rule in (("peak", _peak_rule), ("marginal", _marginal_rule)):
        if (kind, 0.0) in chosen_rules:
            cands[kind, 0.0] = replica_counts(w, num_slots, cap, rule)
    for kind in ("capped", "frozen"):
        thetas = np.array([t for k, t in chosen_rules if k == kind])
        if thetas.size:
            batch = capped_counts(w, num_slots, cap, num_devices, thetas, frozen=kind == "frozen")
            cands.update(zip(((kind, t) for t in thetas), batch.reshape(thetas.size, rows, experts), strict=True))
    ordered = [cands[r] for r in chosen_rules]
    n_noisy = pool - len(ordered)
    if n_noisy > 0:
        rng = np.random.default_rng(0)
        spreads = np.array([NOISE_SPREADS[k % len(NOISE_SPREADS)] for k in range(n_noisy)])[:, None, None]
        noisy = w[None] * np.exp(rng.uniform(-1.0, 1.0, size=(n_noisy, rows, experts)) * spreads)
        counts = np.empty_like(noisy)
        counts[0::2] = replica_counts(noisy[0::2].reshape(-1, experts), num_slots, cap, _peak_rule).reshape(
            -1, rows, experts
        )
        if n_noisy > 1:
            counts[1::2] = replica_counts(noisy[1::2].reshape(-1, experts), num_slots, cap, _marginal_rule).reshape(
                -1, rows, experts
            )
        ordered.extend(counts)
    pooled = np.stack(ordered)  # [pool, rows, experts]
    n = pooled.shape[0]
    owner = np.broadcast_to(np.arange(rows), (n, rows))
    if keep >= n:
        return pooled.reshape(-1, experts), owner.ravel()
    forecast = rounds_peak(np.tile(w, (n, 1)), pooled.reshape(-1, experts), num_devices, per_device).reshape(n, rows)
    rank = np.argsort(np.argsort(forecast, axis=0, kind="stable"), axis=0)  # 0 = best forecast of its row
    take = rank < keep
    return pooled[take], owner[take]


def _expand(size: FloatArray, counts: FloatArray) -> IntArray:
    """Expert of every replica [rows, slots], heaviest first, replicas of one expert adjacent."""
    # Any deterministic order will do: replicas of one expert stay adjacent either way.
    order = np.argsort(-size, axis=1)
    reps = np.take_along_axis(counts, order, axis=1).astype(np.int64)
    return np.repeat(order.ravel(), reps.ravel()).reshape(size.shape[0], -1).astype(np.int64)
