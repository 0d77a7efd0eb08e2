"""Static baselines: fixed semi-PD splits (including (100, 100)) and co-located vLLM-style
instances (chunked vLLM-S or prefill-first vLLM-D), each on a fixed number of replicas.

All take a base FleetSetup with one serving pool and derive the layout from it, so every baseline
runs on the same accelerators, model and trace.
"""

from __future__ import annotations

from dataclasses import replace

from semipd.sim.fleet.controller import StaticController
from semipd.sim.fleet.instance import SwitchMode
from semipd.sim.fleet.setup import FleetSetup, PoolSetup

SPLIT_GRID = (*((x, 100) for x in range(30, 101, 10)), (100, 80), (100, 60), (100, 50), (100, 40))
"""Candidate static splits for the best-static search (prefill share with full decode, then
decode share below a full prefill: both directions of the contended trade-off)."""


def serving_pool(base: FleetSetup) -> PoolSetup:
    pools = [p for p in base.pools if p.role == "serve"]
    if len(pools) != 1:
        raise ValueError(f"baselines need a base fleet with exactly one serving pool, got {len(pools)}")
    return pools[0]


def fixed(base: FleetSetup, replicas: int) -> FleetSetup:
    """The base pool pinned to `replicas` (min = max = replicas)."""
    p = serving_pool(base)
    return base.with_pool(p.name, replicas=replicas, min_replicas=replicas, max_replicas=replicas)


def static_split(base: FleetSetup, prefill: int, decode: int, replicas: int) -> tuple[FleetSetup, StaticController]:
    p = serving_pool(fixed(base, replicas))
    cfg = replace(p.instance, prefill_percent=prefill, decode_percent=decode)
    setup = fixed(base, replicas).with_pool(p.name, kind="semipd", instance=cfg)
    return setup, StaticController(f"static-{prefill}-{decode}")


def colocated(base: FleetSetup, replicas: int, chunked: bool = True, chunk_tokens: int = 1024
              ) -> tuple[FleetSetup, StaticController]:  # fmt: skip
    p = serving_pool(fixed(base, replicas))
    cfg = replace(p.instance, chunked=chunked, chunk_tokens=chunk_tokens, switch_mode=SwitchMode.NONE)
    setup = fixed(base, replicas).with_pool(p.name, kind="colocated", instance=cfg)
    return setup, StaticController("vllm-chunked" if chunked else "vllm-prefill-first")
