"""Routing: least outstanding tokens, and prefix affinity under a load cap."""

from __future__ import annotations

from dataclasses import dataclass

from semipd.sim.fleet.prefix import PrefixCache, cached_tokens
from semipd.sim.fleet.requests import SimRequest
from semipd.sim.fleet.router import Router, RouterConfig, RouterKind
from semipd.traces import TraceRequest


@dataclass
class Inst:
    name: str
    outstanding: int
    prefix: PrefixCache | None = None


def req(hash_ids: tuple[int, ...] = (), tokens: int = 4000) -> SimRequest:
    return SimRequest(0, TraceRequest(0.0, tokens, 10, hash_ids))


def test_least_outstanding_tokens_wins() -> None:
    r = Router(RouterConfig())
    pool = [Inst("a", 500), Inst("b", 20), Inst("c", 900)]
    assert r.pick(req(), pool).name == "b"  # type: ignore[arg-type]


def test_ties_rotate() -> None:
    r = Router(RouterConfig(), seed=0)
    pool = [Inst("a", 0), Inst("b", 0), Inst("c", 0)]
    picks = {r.pick(req(), pool).name for _ in range(3)}  # type: ignore[arg-type]
    assert picks == {"a", "b", "c"}


def test_prefix_affinity_within_the_load_cap_and_cached_tokens() -> None:
    warm = PrefixCache(100)
    warm.insert((1, 2, 3, 4))
    cold = PrefixCache(100)
    cfg = RouterConfig(RouterKind.PREFIX_AWARE, load_cap_ratio=0.5, load_cap_tokens=1000)
    pool = [Inst("cold", 0, cold), Inst("warm", 900, warm)]
    r = req((1, 2, 3, 9))
    assert Router(cfg).pick(r, pool).name == "warm"  # type: ignore[arg-type]
    assert r.cached == 3 * 512
    assert r.new_tokens == 4000 - 1536
    # Over the cap (0 x 1.5 + 1000 < 5000): load wins.
    pool = [Inst("cold", 0, cold), Inst("warm", 5000, warm)]
    r = req((1, 2, 3, 9))
    assert Router(cfg).pick(r, pool).name == "cold"  # type: ignore[arg-type]
    assert r.cached == 0
    assert r.new_tokens == 4000


def test_prefix_cache_is_lru_in_blocks_and_keeps_one_token_to_compute() -> None:
    c = PrefixCache(3)
    c.insert((1, 2, 3))
    c.insert((1, 4))  # touches 1, evicts 2
    assert c.match((1, 2, 3)) == 1
    assert c.match((1, 4)) == 2
    assert cached_tokens(8, 1000) == 999
