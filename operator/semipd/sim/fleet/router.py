"""Request routing across a fleet's entry instances.

least-outstanding: the instance with the fewest outstanding tokens (prompt tokens still to compute
plus output tokens still to generate), ties broken by a rotating, seeded start so equal instances
share the load. prefix-aware (traces with hash_ids): among instances whose load is within a cap of
the least loaded one, the one holding the longest cached prefix of the request; otherwise
least-outstanding. Either way the chosen instance's cached prefix shortens the request's prefill.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from semipd.sim.fleet.instance import Instance
from semipd.sim.fleet.prefix import cached_tokens
from semipd.sim.fleet.requests import SimRequest


class RouterKind(Enum):
    LEAST_OUTSTANDING = "least-outstanding"
    PREFIX_AWARE = "prefix-aware"


@dataclass(frozen=True)
class RouterConfig:
    kind: RouterKind = RouterKind.LEAST_OUTSTANDING
    load_cap_ratio: float = 0.5
    """Prefix affinity may pick an instance with up to (1 + ratio) x the least load ..."""
    load_cap_tokens: int = 16384
    """... plus this many tokens (so an idle fleet still follows prefixes)."""


class Router:
    def __init__(self, config: RouterConfig, seed: int = 0) -> None:
        self.config = config
        self._turn = seed

    def pick(self, r: SimRequest, candidates: Sequence[Instance]) -> Instance:
        """Choose an instance (candidates must be non-empty) and set the request's cached prefix."""
        n = len(candidates)
        self._turn += 1
        start = self._turn % n
        best = candidates[start]
        best_load = best.outstanding
        for k in range(1, n):
            inst = candidates[(start + k) % n]
            if inst.outstanding < best_load:
                best, best_load = inst, inst.outstanding
        chosen = best
        hit = 0
        if r.hash_ids:
            if self.config.kind is RouterKind.PREFIX_AWARE:
                cap = best_load * (1.0 + self.config.load_cap_ratio) + self.config.load_cap_tokens
                best_hit = best.prefix.match(r.hash_ids) if best.prefix is not None else 0
                for k in range(n):
                    inst = candidates[(start + k) % n]
                    if inst.prefix is None or inst.outstanding > cap or inst is best:
                        continue
                    m = inst.prefix.match(r.hash_ids)
                    if m > best_hit or (m == best_hit and m > 0 and inst.outstanding < chosen.outstanding):
                        chosen, best_hit = inst, m
                hit = best_hit
            elif chosen.prefix is not None:
                hit = chosen.prefix.match(r.hash_ids)
        r.cached = cached_tokens(hit, r.input)
        r.new_tokens = r.input - r.cached
        return chosen
