"""The simulated world's ground truth, apart from what the policy is told.

The policy plans with the latency model of `semipd.perf.resolve` (its prior). By default the
simulated fleet runs on the same constants: a perfect model no real fleet offers. A `Truth`
changes the world only: prefill and decode speed (e.g. +-30 %) and the contention parameters
(overlap, interference), so a controller has to learn online. `semipd simulate --truth-perturb`,
`--contention` and `--contention-file` expose it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from semipd.perf import ContentionModel, LatencyModel
from semipd.sim.fleet.setup import FleetSetup

PERTURB_RANGE = (0.25, 4.0)
"""Scales outside this are refused as typos (a 4x slower world is no longer a perturbation)."""


@dataclass(frozen=True)
class Truth:
    """How the world differs from the prior: time scales (> 1 slower) and the world's contention."""

    prefill_scale: float = 1.0
    """Prefill batch time x this (compute efficiency and fixed cost scaled)."""
    decode_scale: float = 1.0
    """Decode step time x this (bandwidth efficiency and per-step costs scaled)."""
    contention: ContentionModel | None = None
    """None: the pool models keep their own contention."""

    def __post_init__(self) -> None:
        lo, hi = PERTURB_RANGE
        for name, v in (("prefill_scale", self.prefill_scale), ("decode_scale", self.decode_scale)):
            if not (math.isfinite(v) and lo <= v <= hi):
                raise ValueError(f"truth {name} must be in [{lo}, {hi}], got {v!r}")

    @property
    def is_prior(self) -> bool:
        return self.prefill_scale == 1.0 and self.decode_scale == 1.0 and self.contention is None

    def apply(self, model: LatencyModel) -> LatencyModel:
        """The world's latency model for a pool whose prior is `model`."""
        if self.is_prior:
            return model
        hw = model.hardware
        p, d = self.prefill_scale, self.decode_scale
        world = replace(
            hw,
            mfu=hw.mfu / p,
            attention_efficiency=hw.attention_efficiency / p,
            prefill_overhead_s=hw.prefill_overhead_s * p,
            bandwidth_efficiency=hw.bandwidth_efficiency / d,
            decode_overhead_s=hw.decode_overhead_s * d,
            per_sequence_overhead_s=hw.per_sequence_overhead_s * d,
        )
        return model.with_changes(hardware=world, contention=self.contention)

    def label(self) -> str:
        parts = []
        if self.prefill_scale != 1.0 or self.decode_scale != 1.0:
            parts.append(f"prefill x{self.prefill_scale:g}, decode x{self.decode_scale:g}")
        if self.contention is not None:
            parts.append(self.contention.label())
        return "; ".join(parts) or "prior"

    @classmethod
    def parse_perturb(cls, text: str, contention: ContentionModel | None = None) -> Truth:
        """ "P,D": prefill and decode time scales (the CLI's --truth-perturb), e.g. 1.3,0.7."""
        parts = text.split(",")
        try:
            p, d = (float(x) for x in parts)
        except ValueError:
            raise ValueError(
                f"--truth-perturb wants two time scales PREFILL,DECODE (e.g. 1.3,0.7), got {text!r}"
            ) from None
        return cls(p, d, contention)


def with_truth(setup: FleetSetup, truth: Truth) -> FleetSetup:
    """`setup` with every pool's latency model replaced by the world's."""
    if truth.is_prior:
        return setup
    return replace(setup, pools=tuple(replace(p, model=truth.apply(p.model)) for p in setup.pools))
