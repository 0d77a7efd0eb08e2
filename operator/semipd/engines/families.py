"""Engine metric families: engines exporting the same TTFT/ITL histograms (e.g. `sim` and
`sglang-semipd` both export SGLang's), and which histogram bucket each SLO objective falls on.
Shared by the chart's rules and dashboard and by the operator's SLO metrics.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from semipd.engines import DRIVERS
from semipd.engines.promql import MetricSet, le_label


@dataclass(frozen=True)
class Family:
    """Engines exporting the same histograms (e.g. `sim` and `sglang-semipd` both export SGLang's)."""

    name: str
    kinds: tuple[str, ...]
    metrics: MetricSet


def metric_families() -> list[Family]:
    """One family per distinct TTFT/ITL histogram pair among the engine drivers."""
    groups: dict[tuple[str, str], list[str]] = {}
    sets: dict[tuple[str, str], MetricSet] = {}
    for kind in sorted(DRIVERS):
        ms = DRIVERS[kind].metrics
        key = (ms.ttft, ms.itl)
        groups.setdefault(key, []).append(kind)
        sets.setdefault(key, ms)
    out = []
    for key, kinds in groups.items():
        name = key[0].split(":", 1)[0] if ":" in key[0] else kinds[0]
        out.append(Family(name, tuple(kinds), sets[key]))
    return sorted(out, key=lambda f: f.name)


def family_of(kind: str) -> Family:
    """The metric family an engine kind exports."""
    return next(f for f in metric_families() if kind in f.kinds)


def slo_buckets(kinds: Sequence[str], targets_s: dict[str, float]) -> dict[tuple[str, str], str]:
    """For each objective (`ttft`, `itl`) and each engine family among `kinds`: the `le` label of the
    largest bucket bound at or below the target (rounding down never counts as good what was not
    measured as such). A target below a family's smallest bound gets no entry: it cannot be measured."""
    out: dict[tuple[str, str], str] = {}
    for family in sorted({family_of(k).name: family_of(k) for k in kinds}.values(), key=lambda f: f.name):
        ms = family.metrics
        for slo, bounds in (("ttft", ms.ttft_buckets), ("itl", ms.itl_buckets)):
            try:
                out[(slo, family.name)] = le_label(ms.bucket_at_or_below(bounds, targets_s[slo]))
            except ValueError:
                continue
    return out
