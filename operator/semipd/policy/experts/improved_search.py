"""Improved expert placement, phases 2-3: packing round by round (heaviest remaining replicas onto the
lightest devices), then local search on the busiest devices: swaps with slightly lighter replicas
and count moves, each made only if every device it touches ends below the old peak.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from semipd.policy.experts.improved_counts import _expand
from semipd.policy.experts.layout import FloatArray, IntArray

BoolArray = np.ndarray[tuple[int, ...], np.dtype[np.bool_]]

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
_REL_TOL = 1e-9


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
