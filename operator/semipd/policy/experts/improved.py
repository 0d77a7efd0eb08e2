"""Improved expert placement: anti-affine, never worse than EPLB where EPLB's own map is allowed.

Same inputs, outputs and constraints as DeepSeek EPLB (equal slots per device, (E + R) % EP == 0,
each expert group on one node in the hierarchical policy), plus anti-affinity: no device holds two
replicas of one expert (a second copy only costs memory; vllm-ascend's map cannot express it).

EPLB's grouping of experts onto nodes is kept; every (layer, node) row is solved on its own:
1. replica counts by several rules -- EPLB's largest load per replica, the marginal gain
   w/c - w/(c+1), and capped rules that allow at most theta x the mean device load per piece --
   of which a cheap forecast picks the ones to search (more per row for small problems);
2. packing round by round, the heaviest remaining replicas onto the lightest devices;
3. local search on the busiest devices: swaps with slightly lighter replicas, and count moves
   (a slot changes expert). A move is made only if every device it touches ends below the old
   peak, so the sorted load vector falls strictly and the search terminates;
4. per row, EPLB's own slots where they are lighter and anti-affine; rows that lose to an EPLB
   map with stacked copies get a second, wider search.
Everything is vectorised over rows (and over candidates).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from semipd.policy.experts.eplb import rebalance_experts
from semipd.policy.experts.layout import FloatArray, IntArray, Placement, Topology, Weight, as_weight, tables
from semipd.policy.experts.metrics import device_loads

BoolArray = np.ndarray[tuple[int, ...], np.dtype[np.bool_]]
GainRule = Callable[[FloatArray, FloatArray], FloatArray]

NEAR_WINDOW = np.arange(12)
"""Swap partners of a replica on the busiest device: the next-lighter replicas in size order."""
SOURCES = 8
"""Busiest devices that each look for a swap in one step."""
SOURCE_SLOTS = 8
"""Slots considered for giving up a replica to an expert on the busiest device."""
MAX_STEPS = 400
"""Cap on local-search steps per call."""
RESORT_EVERY = 8
"""Steps between re-ranking items by size after count moves changed sizes."""
CANDIDATE_BUDGET = 32_768
"""Slot-rows (rows x slots x candidates) packed and searched per call: 1 candidate at 61 x 320."""
RETRY_BUDGET = 8_192
RETRY_STEPS = 150
"""Slot-rows and steps for the second search of rows that lose to an EPLB map with stacked copies."""
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
_REL_TOL = 1e-9


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


@dataclass
class _State:
    """Items are replicas; `item_*` arrays are indexed [row, item], items ranked by size when last sorted."""

    w: FloatArray  # [B, n]
    counts: FloatArray  # [B, n]
    item_kind: IntArray  # [B, p] expert of each item
    item_size: FloatArray  # [B, p]
    item_slot: IntArray  # [B, p] slot (device * per_device + position) holding the item
    slot_item: IntArray  # [B, p]
    start: IntArray  # [B, p] first item (in the last sort) strictly lighter than this one
    loads: FloatArray  # [B, m]
    hosts: BoolArray  # [B, m, n] device hosts expert
    stale: BoolArray  # [B] sizes changed since the last sort
    cap: int
    per_device: int

    @property
    def devices(self) -> int:
        return int(self.loads.shape[1])


def _expand(size: FloatArray, counts: FloatArray) -> IntArray:
    """Expert of every replica [rows, slots], heaviest first, replicas of one expert adjacent."""
    # Any deterministic order will do: replicas of one expert stay adjacent either way.
    order = np.argsort(-size, axis=1)
    reps = np.take_along_axis(counts, order, axis=1).astype(np.int64)
    return np.repeat(order.ravel(), reps.ravel()).reshape(size.shape[0], -1).astype(np.int64)


def _strictly_lighter_start(sizes: FloatArray) -> IntArray:
    """For sizes sorted descending per row, the index of the first strictly smaller entry (p if none)."""
    rows, p = sizes.shape
    new_run = np.ones((rows, p), dtype=bool)
    new_run[:, 1:] = sizes[:, 1:] != sizes[:, :-1]
    idx = np.broadcast_to(np.arange(p), (rows, p))
    # The next run start after i: reverse cumulative minimum over run-start positions.
    next_start = np.where(new_run, idx, p)
    nxt = np.full((rows, p), p, dtype=np.int64)
    nxt[:, :-1] = next_start[:, 1:]
    return np.minimum.accumulate(nxt[:, ::-1], axis=1)[:, ::-1].copy()


def _pack_rounds(w: FloatArray, counts: FloatArray, devices: int, per_device: int, cap: int) -> _State:
    """Round k puts the k-th band of `devices` replicas (heaviest first) onto the lightest devices.

    Replicas of one expert never share a round's device; across rounds a clash is resolved by
    exchanging devices with the nearest item of the round that can take it.
    """
    rows, experts = w.shape
    size = w / counts
    kinds = _expand(size, counts)
    sizes = np.take_along_axis(size, kinds, axis=1)
    p = devices * per_device
    row = np.arange(rows)
    loads = np.zeros((rows, devices))
    hosts = np.zeros((rows, devices, experts), dtype=bool)
    item_slot = np.empty((rows, p), dtype=np.int64)
    for band in range(per_device):
        items = slice(band * devices, (band + 1) * devices)
        band_kinds = kinds[:, items]
        # Heaviest item of the band onto the lightest device.
        order = (
            np.argsort(loads, axis=1, kind="stable") if band else np.broadcast_to(np.arange(devices), (rows, devices))
        )
        order = order.copy()
        clash = hosts[row[:, None], order, band_kinds]
        for r in np.flatnonzero(clash.any(axis=1)):
            _untangle(order[r], band_kinds[r], hosts[r])
        hosts[row[:, None], order, band_kinds] = True
        loads[row[:, None], order] += sizes[:, items]
        item_slot[:, items] = order * per_device + band
    slot_item = np.empty_like(item_slot)
    np.put_along_axis(slot_item, item_slot, np.broadcast_to(np.arange(p), (rows, p)), axis=1)
    return _State(
        w=w,
        counts=counts,
        item_kind=kinds,
        item_size=sizes,
        item_slot=item_slot,
        slot_item=slot_item,
        start=_strictly_lighter_start(sizes),
        loads=loads,
        hosts=hosts,
        stale=np.zeros(rows, dtype=bool),
        cap=cap,
        per_device=per_device,
    )


def _untangle(order: IntArray, kinds: IntArray, hosts: BoolArray) -> None:
    """Reassign devices within one band so no item lands beside a copy of its expert (in place)."""
    n = order.size
    for j in range(n):
        if not hosts[order[j], kinds[j]]:
            continue
        for step in range(1, n):
            for k in (j + step, j - step):
                if 0 <= k < n and not hosts[order[k], kinds[j]] and not hosts[order[j], kinds[k]]:
                    order[j], order[k] = order[k], order[j]
                    break
            else:
                continue
            break
        else:
            raise ValueError("no anti-affine placement found: too many replicas for the devices")


def _resort(st: _State, rows: IntArray) -> None:
    """Re-rank the items of `rows` by size (after replica counts changed)."""
    if rows.size == 0:
        return
    order = np.argsort(-st.item_size[rows], axis=1, kind="stable")
    for name in ("item_kind", "item_size", "item_slot"):
        arr = getattr(st, name)
        arr[rows] = np.take_along_axis(arr[rows], order, axis=1)
    p = st.item_slot.shape[1]
    slot_item = np.empty((rows.size, p), dtype=np.int64)
    np.put_along_axis(slot_item, st.item_slot[rows], np.broadcast_to(np.arange(p), (rows.size, p)), axis=1)
    st.slot_item[rows] = slot_item
    st.start[rows] = _strictly_lighter_start(st.item_size[rows])
    st.stale[rows] = False


@dataclass
class _Step:
    """Per-step views of the active rows (copies only when some rows have finished)."""

    rows: IntArray  # [A] rows of the state
    loads: FloatArray
    w: FloatArray
    counts: FloatArray
    item_kind: IntArray
    item_size: FloatArray
    item_slot: IntArray
    slot_item: IntArray
    start: IntArray

    @classmethod
    def of(cls, st: _State, rows: IntArray) -> _Step:
        full = rows.size == st.loads.shape[0]

        def pick(arr: npt.NDArray[Any]) -> npt.NDArray[Any]:
            return arr if full else arr[rows]

        return cls(
            rows, pick(st.loads), pick(st.w), pick(st.counts), pick(st.item_kind), pick(st.item_size),
            pick(st.item_slot), pick(st.slot_item), pick(st.start),
        )  # fmt: skip


def _along(arr: npt.NDArray[Any], idx: IntArray) -> npt.NDArray[Any]:
    """arr[r, idx[r, ...]] for 2-D arr and any-shaped idx with leading row axis."""
    return np.take_along_axis(arr, idx.reshape(idx.shape[0], -1), axis=1).reshape(idx.shape)


def _best_swaps(st: _State, v: _Step, srcs: IntArray, src_load: FloatArray) -> tuple[FloatArray, IntArray, IntArray]:
    """Best swap per source device: (pair peak [A, q], source item [A, q], partner item [A, q]).

    An item x of the source may swap with one of the next-lighter items y (size ranks) on another
    device when neither lands beside a copy of itself; the pair peak is max(both new loads).
    """
    s, m, p = st.per_device, st.devices, st.item_kind.shape[1]
    n_exp = st.hosts.shape[2]
    rows = v.rows[:, None, None, None]
    rx = _along(v.slot_item, srcs[:, :, None] * s + np.arange(s))  # [A, q, s]
    kx, sx = _along(v.item_kind, rx), _along(v.item_size, rx)
    ry = _along(v.start, rx)[..., None] + NEAR_WINDOW  # [A, q, s, K]
    in_range = ry < p
    ry = np.minimum(ry, p - 1)
    ky, sy, dy = _along(v.item_kind, ry), _along(v.item_size, ry), _along(v.item_slot, ry) // s
    delta = sx[..., None] - sy
    lane = np.arange(v.rows.size)[:, None, None, None]
    pair = np.maximum(src_load[:, :, None, None] - delta, np.take(v.loads, lane * m + dy) + delta)
    src4 = srcs[:, :, None, None]
    # Flat indices into hosts [B, m, n]: far cheaper than three-array fancy indexing.
    x_at_y = np.take(st.hosts, (rows * m + dy) * n_exp + kx[..., None])
    y_at_src = np.take(st.hosts, (rows * m + src4) * n_exp + ky)
    ok = in_range & (delta > 0) & (dy != src4) & ~x_at_y & ~y_at_src
    pair = np.where(ok, pair, np.inf).reshape(v.rows.size, srcs.shape[1], -1)
    pick = np.argmin(pair, axis=2)
    i, j = np.divmod(pick, NEAR_WINDOW.size)
    score = np.take_along_axis(pair, pick[..., None], axis=2)[..., 0]
    lanes = np.arange(v.rows.size)[:, None]
    qs = np.arange(srcs.shape[1])[None, :]
    return score, rx[lanes, qs, i], ry[lanes, qs, i, j]


def _top2(loads: FloatArray, mask: BoolArray) -> tuple[FloatArray, IntArray, FloatArray]:
    """Largest and second-largest masked load along the last axis: (L1, its device, L2); -inf if none."""
    masked = np.where(mask, loads, -np.inf)
    d1 = np.argmax(masked, axis=-1)
    l1 = np.take_along_axis(masked, d1[..., None], axis=-1)[..., 0]
    np.put_along_axis(masked, d1[..., None], -np.inf, axis=-1)
    return l1, d1, masked.max(axis=-1)


def _best_count_move(st: _State, v: _Step, top: IntArray, peak: FloatArray) -> tuple[FloatArray, IntArray, IntArray]:
    """Best replica-count move for the busiest device: (peak of touched devices, item, new expert) [A].

    Either an expert x there takes the slot of a replica of a (c_a >= 2) elsewhere -- x's replicas
    shrink, a's other replicas grow -- or x (c_x >= 2) hands its slot here to a light expert b. The
    score is the highest load among the devices the move touches; a host of both experts is counted
    exactly for the busiest other host and conservatively beyond it.
    """
    s, m = st.per_device, st.devices
    a_rows, lanes = v.rows[:, None], np.arange(v.rows.size)
    devices = np.arange(m)
    hosts = st.hosts
    rx = _along(v.slot_item, top[:, None] * s + np.arange(s))  # [A, s]
    kx, sx = _along(v.item_kind, rx), _along(v.item_size, rx)
    cx, wx = _along(v.counts, kx), _along(v.w, kx)
    x_hosts = hosts[a_rows, :, kx]  # [A, s, m]

    # x takes a slot from a: candidates are the S slots whose device is lightest without them.
    n_src = min(SOURCE_SLOTS, v.item_kind.shape[1])
    item_dev = v.item_slot // s
    residual = _along(v.loads, item_dev) - v.item_size
    giver_ok = (_along(v.counts, v.item_kind) >= 2) & (item_dev != top[:, None])
    giver_ok &= ~hosts[a_rows, top[:, None], v.item_kind]
    src = np.argpartition(np.where(giver_ok, residual, np.inf), n_src - 1, axis=1)[:, :n_src]  # [A, S]
    ka, da = _along(v.item_kind, src), _along(item_dev, src)
    wa, ca = _along(v.w, ka), _along(v.counts, ka)
    grow_a = wa / np.maximum(ca - 1.0, 1.0) - wa / ca
    new_x = wx / (cx + 1.0)
    shrink_x = sx - new_x
    a1, a1_dev, a2 = _top2(v.loads[:, None, :], hosts[a_rows, :, ka] & (devices != da[:, :, None]))
    a1_hosts_x = x_hosts[lanes[:, None, None], np.arange(s)[None, :, None], a1_dev[:, None, :]]  # [A, s, S]
    a_peak = np.maximum(a1[:, None, :] - shrink_x[:, :, None] * a1_hosts_x, a2[:, None, :]) + grow_a[:, None, :]
    take = np.maximum(
        np.maximum(peak[:, None, None] - shrink_x[:, :, None], a_peak),
        _along(residual, src)[:, None, :] + new_x[:, :, None],
    )
    ok = _along(giver_ok, src)[:, None, :] & (cx < st.cap)[:, :, None]
    ok &= ~hosts[a_rows[:, :, None], da[:, None, :], kx[:, :, None]]
    take = np.where(ok, take, np.inf).reshape(v.rows.size, -1)

    # x gives its slot to b: candidates are the experts whose next replica would be lightest.
    light = np.where(v.counts < st.cap, v.w / (v.counts + 1.0), np.inf)
    nb = min(s + 1, light.shape[1])
    kb = np.argpartition(light, nb - 1, axis=1)[:, :nb]
    pb = _along(light, kb)
    shrink_b = np.where(np.isfinite(pb), _along(v.w / v.counts, kb) - pb, 0.0)
    grow_x = wx / np.maximum(cx - 1.0, 1.0) - sx
    x1, x1_dev, x2 = _top2(v.loads[:, None, :], x_hosts & (devices != top[:, None, None]))
    x1_hosts_b = hosts[a_rows[:, :, None], x1_dev[:, :, None], kb[:, None, :]]  # [A, s, Kb]
    x_peak = np.maximum(x1[:, :, None] - shrink_b[:, None, :] * x1_hosts_b, x2[:, :, None]) + grow_x[:, :, None]
    give = np.maximum(peak[:, None, None] - sx[:, :, None] + pb[:, None, :], x_peak)
    ok = (cx >= 2)[:, :, None] & np.isfinite(pb)[:, None, :] & ~hosts[a_rows, top[:, None], kb][:, None, :]
    give = np.where(ok, give, np.inf).reshape(v.rows.size, -1)

    scores = np.concatenate([take, give], axis=1)
    pick = np.argmin(scores, axis=1)
    is_take = pick < take.shape[1]
    i_t, j_t = np.divmod(pick, n_src)
    i_g, j_g = np.divmod(pick - take.shape[1], nb)
    i_g, j_g = np.where(is_take, 0, i_g), np.where(is_take, 0, j_g)
    item = np.where(is_take, src[lanes, np.minimum(j_t, n_src - 1)], rx[lanes, i_g])
    kind = np.where(is_take, kx[lanes, np.minimum(i_t, s - 1)], kb[lanes, j_g])
    return scores[lanes, pick], item, kind


def _search(
    st: _State, max_steps: int = MAX_STEPS, target: FloatArray | None = None, owner: IntArray | None = None
) -> None:
    """Local search until the busiest device of every row cannot be lowered (or max_steps).

    Each step, per row: the SOURCES busiest devices each look for their best swap, and the busiest
    one also for a replica-count move, made alone when it beats every swap. Swaps are made busiest
    source first, each only on devices that no earlier swap of the row touched in this step, so
    every move of a step is evaluated on current loads. With `target` (per row) and `owner` (the
    problem each row is a candidate for), all candidates of a problem stop once one of them is at
    or below its target.
    """
    m = st.devices
    rows_all = st.loads.shape[0]
    if m < 2:
        return
    q = min(SOURCES, max(1, m // 4))
    active = np.arange(rows_all)
    for step in range(max_steps):
        if active.size == 0:
            return
        if step and step % RESORT_EVERY == 0:
            _resort(st, active[st.stale[active]])
        v = _Step.of(st, active)
        lanes = np.arange(active.size)
        part = np.argpartition(-v.loads, q - 1, axis=1)[:, :q]
        srcs = np.take_along_axis(part, np.argsort(-_along(v.loads, part), axis=1, kind="stable"), axis=1)
        src_load = _along(v.loads, srcs)
        swap_score, swap_x, swap_y = _best_swaps(st, v, srcs, src_load)
        swap_ok = swap_score < src_load * (1.0 - _REL_TOL)

        # Count moves are dearer to evaluate: on the first step (a count vector may be plainly off)
        # and afterwards only where no swap helps.
        look = lanes if step == 0 else np.flatnonzero(~swap_ok[:, 0])
        recount = np.zeros(active.size, dtype=bool)
        if look.size:
            score, item, kind = _best_count_move(st, _Step.of(st, active[look]), srcs[look, 0], src_load[look, 0])
            good = (score < src_load[look, 0] * (1.0 - _REL_TOL)) & (score < swap_score[look, 0])
            _retarget(st, active[look[good]], item[good], kind[good])
            recount[look[good]] = True

        used = np.zeros((active.size, m), dtype=bool)
        go_rows, go_x, go_y = [], [], []
        partner = st.item_slot[active[:, None], swap_y] // st.per_device
        for k in range(q):
            go = swap_ok[:, k] & ~recount & ~used[lanes, srcs[:, k]] & ~used[lanes, partner[:, k]]
            used[lanes[go], srcs[go, k]] = True
            used[lanes[go], partner[go, k]] = True
            go_rows.append(active[go])
            go_x.append(swap_x[go, k])
            go_y.append(swap_y[go, k])
        _swap(st, np.concatenate(go_rows), np.concatenate(go_x), np.concatenate(go_y))

        progressed = swap_ok[:, 0] | recount
        # A stuck row whose size ranks are stale gets re-sorted and one more try.
        retry = ~progressed & st.stale[active]
        _resort(st, active[retry])
        active = active[progressed | retry]
        if target is not None and owner is not None and active.size:
            reached = st.loads[active].max(axis=1) <= target[active]
            done = np.zeros(int(owner.max()) + 1, dtype=bool)
            done[owner[active[reached]]] = True
            active = active[~done[owner[active]]]


def _swap(st: _State, rows: IntArray, x: IntArray, y: IntArray) -> None:
    s = st.per_device
    slot_x, slot_y = st.item_slot[rows, x], st.item_slot[rows, y]
    dev_x, dev_y = slot_x // s, slot_y // s
    kx, ky = st.item_kind[rows, x], st.item_kind[rows, y]
    vx, vy = st.item_size[rows, x], st.item_size[rows, y]
    st.item_slot[rows, x], st.item_slot[rows, y] = slot_y, slot_x
    st.slot_item[rows, slot_x], st.slot_item[rows, slot_y] = y, x
    st.hosts[rows, dev_x, kx] = False
    st.hosts[rows, dev_y, ky] = False
    st.hosts[rows, dev_x, ky] = True
    st.hosts[rows, dev_y, kx] = True
    st.loads[rows, dev_x] += vy - vx
    st.loads[rows, dev_y] += vx - vy


def _retarget(st: _State, rows: IntArray, item: IntArray, new_kind: IntArray) -> None:
    """The slot holding `item` switches to `new_kind`: one replica fewer of its expert, one more of new_kind."""
    if rows.size == 0:
        return
    s = st.per_device
    old_kind = st.item_kind[rows, item]
    dev = st.item_slot[rows, item] // s
    st.counts[rows, old_kind] -= 1.0
    st.counts[rows, new_kind] += 1.0
    st.item_kind[rows, item] = new_kind
    st.hosts[rows, dev, old_kind] = False
    st.hosts[rows, dev, new_kind] = True
    piece = st.w[rows] / st.counts[rows]
    sizes = np.take_along_axis(piece, st.item_kind[rows], axis=1)
    st.item_size[rows] = sizes
    slot_sizes = np.take_along_axis(sizes, st.slot_item[rows], axis=1)
    st.loads[rows] = slot_sizes.reshape(rows.size, -1, s).sum(axis=2)
    st.stale[rows] = True


def _slot_kinds(st: _State) -> IntArray:
    return np.take_along_axis(st.item_kind, st.slot_item, axis=1)


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


def place_flat(
    w: FloatArray,
    num_devices: int,
    per_device: int,
    budget: int = CANDIDATE_BUDGET,
    max_steps: int = MAX_STEPS,
    target: FloatArray | None = None,
) -> IntArray:
    """Best anti-affine placement for each row of w [rows, experts] -> expert per slot [rows, slots].

    A row's search may stop once some candidate's busiest device is at or below `target` (per row).
    """
    counts, owner = _count_candidates(w, num_devices, per_device, budget)
    st = _pack_rounds(w[owner], counts, num_devices, per_device, num_devices)
    _search(st, max_steps, None if target is None else target[owner], owner)
    kinds = _slot_kinds(st)
    peak = (st.w / st.counts)[np.arange(owner.size)[:, None], kinds].reshape(owner.size, num_devices, -1)
    peak = peak.sum(axis=2).max(axis=1)
    # Per row the lightest candidate; the earliest candidate wins ties, so the choice is deterministic.
    order = np.lexsort((np.arange(owner.size), peak, owner))
    first = np.ones(order.size, dtype=bool)
    first[1:] = owner[order][1:] != owner[order][:-1]
    best: IntArray = kinds[order[first]]
    return best


def has_duplicates(phy2log: IntArray, num_devices: int) -> BoolArray:
    """Per row: some device holds two replicas of one expert (slots device-major, equal per device)."""
    per_device = np.sort(phy2log.reshape(phy2log.shape[0], num_devices, -1), axis=2)
    dup: BoolArray = (per_device[:, :, 1:] == per_device[:, :, :-1]).any(axis=(1, 2))
    return dup


def rebalance_experts_improved(
    weight: Weight, num_replicas: int, num_groups: int, num_nodes: int, num_gpus: int, *, anti_affinity: bool = True
) -> Placement:
    """Drop-in for eplb.rebalance_experts (same policy switch and layout), never worse than it.

    It keeps EPLB's grouping of experts onto nodes (hierarchical policy) and re-places each node of
    each layer. A node keeps EPLB's own slots where those are lighter on its busiest device and
    allowed: always without anti_affinity; with it, only where EPLB's slots there happen to be
    anti-affine. (EPLB sometimes gains by stacking two copies on one device, which anti-affinity
    forbids; see docs/placement.md.) Raises ValueError when anti-affinity cannot be met: more slots
    per node than its experts times its devices.
    """
    w = as_weight(weight)
    layers, experts = w.shape
    topology = Topology(num_replicas, num_groups, num_nodes, num_gpus)
    topology.check(experts)
    baseline = rebalance_experts(w, num_replicas, num_groups, num_nodes, num_gpus)
    if not topology.hierarchical:
        num_nodes = 1
    devices_per_node = num_gpus // num_nodes
    experts_per_node = experts // num_nodes
    slots_per_node = num_replicas // num_nodes
    if slots_per_node > experts_per_node * devices_per_node:
        if not anti_affinity:
            return baseline
        raise ValueError(
            f"anti-affinity allows at most {experts_per_node * devices_per_node} slots per node "
            f"({experts_per_node} experts x {devices_per_node} devices), got {slots_per_node}"
        )
    # Rows are (layer, node); EPLB's node of each logical expert is read off its own map.
    theirs = baseline.phy2log.reshape(layers * num_nodes, slots_per_node)
    node_experts = np.sort(theirs, axis=1)
    keep = np.ones_like(node_experts, dtype=bool)
    keep[:, 1:] = node_experts[:, 1:] != node_experts[:, :-1]
    node_experts = node_experts[keep].reshape(layers * num_nodes, experts_per_node)
    node_w = np.take_along_axis(np.repeat(w, num_nodes, axis=0), node_experts, axis=1)
    # EPLB's slots in the same node-local ids (node_experts rows are sorted; offset rows apart).
    offset = (np.arange(theirs.shape[0]) * experts)[:, None]
    found = np.searchsorted((node_experts + offset).ravel(), (theirs + offset).ravel())
    theirs_local = found.reshape(theirs.shape) - offset // experts * experts_per_node
    theirs_peak = device_loads(node_w, theirs_local, devices_per_node).max(axis=1)
    allowed = ~has_duplicates(theirs, devices_per_node) if anti_affinity else np.ones(theirs.shape[0], dtype=bool)
    local = place_flat(node_w, devices_per_node, num_replicas // num_gpus)
    ours = np.take_along_axis(node_experts, local, axis=1)
    ours_peak = device_loads(node_w, local, devices_per_node).max(axis=1)
    # Rows that lose to a map we may not take get a second, wider search (few rows: many candidates each).
    losing = np.flatnonzero(~allowed & (theirs_peak < ours_peak * (1.0 - _REL_TOL)))
    if losing.size:
        retry = place_flat(
            node_w[losing],
            devices_per_node,
            num_replicas // num_gpus,
            RETRY_BUDGET,
            RETRY_STEPS,
            target=theirs_peak[losing] * (1.0 - 2 * _REL_TOL),
        )
        retry_peak = device_loads(node_w[losing], retry, devices_per_node).max(axis=1)
        better = retry_peak < ours_peak[losing] * (1.0 - _REL_TOL)
        local[losing[better]] = retry[better]
        ours[losing[better]] = np.take_along_axis(node_experts[losing[better]], retry[better], axis=1)
        ours_peak[losing[better]] = retry_peak[better]
    use_theirs = allowed & (theirs_peak < ours_peak * (1.0 - _REL_TOL))
    phy2log = np.where(use_theirs[:, None], theirs, ours).reshape(layers, num_replicas)
    return tables(phy2log, experts)
