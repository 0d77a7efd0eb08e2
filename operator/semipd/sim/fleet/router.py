"""Request routing across a fleet's entry instances.

least-outstanding: the instance with the fewest outstanding tokens (prompt tokens still to compute
plus output tokens still to generate), ties broken by a rotating, seeded start so equal instances
share the load. prefix-aware (traces with hash_ids): among instances whose load is within a cap of
the least loaded one, the one holding the longest cached prefix of the request; otherwise
least-outstanding. Either way the chosen instance's cached prefix shortens the request's prefill.

KV-cache placement (`KVSteering`) narrows the candidates first, from the `KVCachePlacementStatus`
the operator publishes: by the pods' llm-d context-length-range labels (`labels`: llm-d's
context-length-aware filter, the rest falling back to all candidates when no pod is in range) or by
the per-class pool weights of the HTTPRoute (`weights`: a smooth weighted round robin picks the
pool, then the router picks inside it). A status that does not steer is ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from semipd.api.v1alpha1 import KVCachePlacementStatus
from semipd.policy.kvcache import steers
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


class KVRouting(Enum):
    LABELS = "labels"
    """Filter on the pods' context-length-range label (llm-d context-length-aware, enableFiltering)."""
    WEIGHTS = "weights"
    """Pick the node pool by the class's weights (HTTPRoute backendRefs), then an instance in it."""


def parse_range(value: str) -> tuple[int, int]:
    """`"0-32768"` -> (0, 32768); the llm-d context-length-range label format."""
    lo, sep, hi = value.partition("-")
    if not sep or not lo.isdigit() or not hi.isdigit() or int(lo) > int(hi):
        raise ValueError(f"context range {value!r} is not 'min-max' in tokens")
    return int(lo), int(hi)


class KVSteering:
    """The router's view of the published KV-cache placement."""

    def __init__(self, mode: KVRouting = KVRouting.LABELS) -> None:
        self.mode = mode
        self.status: KVCachePlacementStatus | None = None
        self._ranges: dict[str, tuple[int, int]] = {}
        self._weights: dict[bool, dict[str, int]] = {False: {}, True: {}}
        self._credit: dict[bool, dict[str, float]] = {False: {}, True: {}}

    def update(self, status: KVCachePlacementStatus | None) -> None:
        self.status = status
        if status is None:
            return
        self._ranges = {p.name: parse_range(p.context_range) for p in status.pools if p.context_range}
        self._weights = {
            False: {p.name: p.short_weight for p in status.pools},
            True: {p.name: p.long_weight for p in status.pools},
        }

    def is_long(self, r: SimRequest) -> bool:
        return self.status is not None and r.input > self.status.threshold

    def candidates(self, r: SimRequest, admissible: Sequence[Instance]) -> Sequence[Instance]:
        """The instances the request may go to under the placement (non-empty if `admissible` is)."""
        if not steers(self.status):
            return admissible
        if self.mode is KVRouting.LABELS:
            n = r.input
            ranges = self._ranges
            inside = [i for i in admissible if i.pool not in ranges or ranges[i.pool][0] <= n <= ranges[i.pool][1]]
            return inside or admissible
        long = self.is_long(r)
        weights = self._weights[long]
        pools = {i.pool for i in admissible if weights.get(i.pool, 0) > 0}
        if not pools:
            return admissible
        # Smooth weighted round robin (nginx): deterministic, and each pool's share converges to its weight.
        credit = self._credit[long]
        total = 0
        for name in sorted(pools):
            credit[name] = credit.get(name, 0.0) + weights[name]
            total += weights[name]
        chosen = max(sorted(pools), key=lambda name: credit[name])
        credit[chosen] -= total
        return [i for i in admissible if i.pool == chosen]
