"""Fully disaggregated xPyD (DistServe-style): x prefill instances and y decode instances.

Prefill instances run whole-GPU FCFS prefill batches (same token budget and KV reservation as the
engine, but holding only the prompt's KV), emit the first token, then transfer the prompt's KV to
the least-loaded decode instance with room (time = prompt tokens x KV bytes/token / link
bandwidth); with no room anywhere the request waits FIFO, its KV still held on the prefill side.
Decode instances run the continuous-batching loop at full share, never contended. The best static
ratio is found by search over x + y = budget (bench).
"""

from __future__ import annotations

from dataclasses import replace

from semipd.sim.fleet.controller import StaticController
from semipd.sim.fleet.instance import SwitchMode
from semipd.sim.fleet.setup import FleetSetup

from .static import serving_pool

PREFILL_POOL = "prefill"
DECODE_POOL = "decode"


def disaggregated_pools(base: FleetSetup, prefill: int, decode: int,
                        prefill_bounds: tuple[int, int] | None = None,
                        decode_bounds: tuple[int, int] | None = None) -> FleetSetup:  # fmt: skip
    """The base pool's hardware split into a prefill pool and a decode pool (bounds default fixed)."""
    p = serving_pool(base)
    cfg = replace(p.instance, prefill_percent=100, decode_percent=100, switch_mode=SwitchMode.NONE)
    lo_p, hi_p = prefill_bounds or (prefill, prefill)
    lo_d, hi_d = decode_bounds or (decode, decode)
    pools = (
        replace(p, name=PREFILL_POOL, kind="prefill", instance=cfg, replicas=prefill, min_replicas=lo_p,
                max_replicas=hi_p),
        replace(p, name=DECODE_POOL, kind="decode", instance=cfg, replicas=decode, min_replicas=lo_d,
                max_replicas=hi_d),
    )  # fmt: skip
    others = tuple(q for q in base.pools if q is not p)
    return replace(base, pools=others + pools)


def static_disaggregated(base: FleetSetup, prefill: int, decode: int) -> tuple[FleetSetup, StaticController]:
    if prefill < 1 or decode < 1:
        raise ValueError("xPyD needs at least one prefill and one decode instance")
    return disaggregated_pools(base, prefill, decode), StaticController(f"disagg-{prefill}p{decode}d")


def ratios(budget: int) -> list[tuple[int, int]]:
    """Every (x, y) with x + y = budget instances."""
    return [(x, budget - x) for x in range(1, budget)]
