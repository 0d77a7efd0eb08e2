"""Test-only fault injection for the simulated prefill worker, from SEMIPD_SIM_FAULT.

Syntax: `kind[:percent,percent...]` entries separated by `;`. Without percents a fault applies to
every prefill worker; with them only to workers started with one of those shares (so a test can
make one particular split change fail). Kinds:
  prefill-crash-on-start  exit with status 3 before attaching
  prefill-hang-on-start   attach but never report ready
  prefill-crash-on-batch  exit with status 3 on receiving the first prefill batch
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

FAULT_ENV = "SEMIPD_SIM_FAULT"
KINDS = ("prefill-crash-on-start", "prefill-hang-on-start", "prefill-crash-on-batch")
CRASH_STATUS = 3


@dataclass(frozen=True)
class Fault:
    kind: str
    percents: frozenset[int] | None

    def applies(self, percent: int) -> bool:
        return self.percents is None or percent in self.percents


def parse_faults(text: str) -> tuple[Fault, ...]:
    faults = []
    for entry in filter(None, (e.strip() for e in text.split(";"))):
        kind, _, spec = entry.partition(":")
        if kind not in KINDS:
            raise ValueError(f"unknown fault {kind!r} in {FAULT_ENV}; known: {', '.join(KINDS)}")
        try:
            percents = frozenset(int(p) for p in spec.split(",")) if spec else None
        except ValueError as e:
            raise ValueError(f"bad percent list {spec!r} in {FAULT_ENV}") from e
        faults.append(Fault(kind, percents))
    return tuple(faults)


def active_faults(env: Mapping[str, str], percent: int) -> frozenset[str]:
    return frozenset(f.kind for f in parse_faults(env.get(FAULT_ENV, "")) if f.applies(percent))
