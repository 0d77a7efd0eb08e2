"""Fits the simulator's contention parameters to measured step latencies (pure numpy, no torch).

The model is the one in docs/latency-model.md (contention), restated in bench/gpu/README.md:
- alone at SM share s, a phase runs at speed g(s, k) = s / (s + k(1 - s)) of its whole-GPU speed;
- co-running with the other phase at share o, it runs at v = g(s, k) * (1 - eps * o).
k is fitted per phase by least squares on the standalone speeds, eps on the co-run speeds given those k.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from semipd.perf.contention import share_speed

Phase = Literal["prefill", "decode"]
PHASES: tuple[Phase, Phase] = ("prefill", "decode")
K_MAX = 10.0
"""Upper end of the k search; k = 1 is proportional sharing, larger means worse than proportional."""


def standalone_speed(share: float | np.ndarray, k: float) -> Any:
    """g(s, k): speed alone at SM share s, relative to alone on the whole GPU (the simulator's own form)."""
    return share_speed(np.asarray(share, dtype=float), k)  # type: ignore[arg-type]  # elementwise on arrays


def corun_speed(share: float | np.ndarray, other_share: float | np.ndarray, k: float, eps: float) -> Any:
    """v = g(s, k) * (1 - eps * o): speed while the other phase runs beside it at share o."""
    return standalone_speed(share, k) * (1.0 - eps * np.asarray(other_share, dtype=float))


@dataclass(frozen=True, slots=True)
class Sample:
    """One measured point: a phase's median step latency at a share, alone (other_share 0) or co-running."""

    model: str
    phase: Phase
    config: str
    """Which workload shape (e.g. 'decode-b64-c4096'); speeds are normalised within one config."""
    share: float
    other_share: float
    latency_s: float
    reps: int = 0
    partition_sms: int = 0
    other_sms: int = 0

    @property
    def corun(self) -> bool:
        return self.other_share > 0.0


def _check_samples(samples: Sequence[Sample]) -> None:
    for s in samples:
        if not (0.0 < s.share <= 1.0) or not (0.0 <= s.other_share <= 1.0):
            raise ValueError(f"sample {s}: shares must be in (0, 1] and [0, 1]")
        if not (s.latency_s > 0.0 and math.isfinite(s.latency_s)):
            raise ValueError(f"sample {s}: latency must be positive and finite")


def speeds(samples: Sequence[Sample]) -> list[tuple[Sample, float]]:
    """Each sample with its speed: the same config's whole-GPU solo latency / this sample's latency.

    Raises when a config has no whole-GPU solo sample to normalise by.
    """
    _check_samples(samples)
    full: dict[tuple[str, Phase, str], float] = {}
    for s in samples:
        if not s.corun and s.share == 1.0:
            key = (s.model, s.phase, s.config)
            full[key] = min(full.get(key, math.inf), s.latency_s)
    out = []
    for s in samples:
        key = (s.model, s.phase, s.config)
        if key not in full:
            raise ValueError(f"no whole-GPU solo sample for {key}: cannot normalise its speeds")
        out.append((s, full[key] / s.latency_s))
    return out


def fit_k(shares: Sequence[float], speed: Sequence[float]) -> float:
    """Least-squares k of g(s, k) to (share, speed) points, searched on [0, K_MAX].

    The residual is smooth in k; a coarse scan finds the basin, golden-section search refines it, so
    the result does not depend on a starting guess. Points at s = 1 carry no information on k.
    """
    s = np.asarray(shares, dtype=float)
    v = np.asarray(speed, dtype=float)
    informative = s < 1.0
    if not informative.any():
        raise ValueError("fit_k needs at least one share below 1.0")
    s, v = s[informative], v[informative]

    def sse(k: float) -> float:
        return float(np.sum((standalone_speed(s, k) - v) ** 2))

    grid = np.linspace(0.0, K_MAX, 1001)
    errs = [sse(k) for k in grid]
    i = int(np.argmin(errs))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = lo + (1 - ratio) * (hi - lo), lo + ratio * (hi - lo)
    fa, fb = sse(a), sse(b)
    for _ in range(60):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = lo + (1 - ratio) * (hi - lo)
            fa = sse(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + ratio * (hi - lo)
            fb = sse(b)
    best = (lo + hi) / 2.0
    return best if sse(best) <= errs[i] else float(grid[i])


def fit_interference(points: Iterable[tuple[float, float, float, float]]) -> float:
    """Least-squares eps of v = g * (1 - eps * o), from (share, other_share, k, speed) co-run points.

    Linear in eps: g - v = eps * (g * o), so eps = sum(a*b) / sum(a*a) with a = g*o, b = g - v.
    Not clamped: a negative eps (co-running faster than the model's standalone g) is reported as measured.
    """
    a_list, b_list = [], []
    for share, other, k, v in points:
        g = float(standalone_speed(share, k))
        a_list.append(g * other)
        b_list.append(g - v)
    a, b = np.asarray(a_list), np.asarray(b_list)
    denom = float(np.sum(a * a))
    if denom == 0.0:
        raise ValueError("fit_interference needs at least one co-run point with other_share > 0")
    return float(np.sum(a * b) / denom)


@dataclass(frozen=True, slots=True)
class ContentionFit:
    prefill_k: float
    decode_k: float
    interference: float
    rms_standalone: float
    rms_corun: float


def fit_contention(samples: Sequence[Sample]) -> ContentionFit:
    """k per phase from the solo samples below the whole GPU, then eps from all co-run samples."""
    with_speed = speeds(samples)
    ks: dict[Phase, float] = {}
    sq_solo: list[float] = []
    for phase in PHASES:
        solo = [(s.share, v) for s, v in with_speed if s.phase == phase and not s.corun]
        ks[phase] = fit_k([p[0] for p in solo], [p[1] for p in solo])
        sq_solo += [(float(standalone_speed(sh, ks[phase])) - v) ** 2 for sh, v in solo if sh < 1.0]
    corun = [(s.share, s.other_share, ks[s.phase], v) for s, v in with_speed if s.corun]
    eps = fit_interference(corun)
    sq_corun = [(float(corun_speed(sh, o, k, eps)) - v) ** 2 for sh, o, k, v in corun]
    return ContentionFit(
        prefill_k=ks["prefill"],
        decode_k=ks["decode"],
        interference=eps,
        rms_standalone=math.sqrt(sum(sq_solo) / len(sq_solo)),
        rms_corun=math.sqrt(sum(sq_corun) / len(sq_corun)),
    )


def k_by_config(samples: Sequence[Sample]) -> dict[str, float]:
    """k of each workload config alone (decode's k grows with batch and context: contention.md)."""
    with_speed = speeds(samples)
    out = {}
    for cfg in sorted({s.config for s in samples}):
        solo = [(s.share, v) for s, v in with_speed if s.config == cfg and not s.corun and s.share < 1.0]
        if solo:
            out[cfg] = fit_k([p[0] for p in solo], [p[1] for p in solo])
    return out


SCHEMA = "semipd.io/contention/v1"


def contention_document(
    *,
    samples: Sequence[Sample],
    hardware: str,
    device: str,
    partitioning: str,
    measured_at: str,
    extra: Mapping[str, Any] | None = None,
    per_model_extra: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The JSON document the simulator's --contention-file reads (format in bench/gpu/README.md).

    With unpartitioned streams a share is not enforced, so nothing is fitted: the k and eps fields are
    null and only the raw samples are written.
    """
    fitted = partitioning in ("green-context", "mps", "cpu")
    models = sorted({s.model for s in samples})
    per_model: dict[str, Any] = {}
    for model in models:
        mine = [s for s in samples if s.model == model]
        entry: dict[str, Any] = {}
        if fitted:
            f = fit_contention(mine)
            entry.update(
                prefill_k=f.prefill_k,
                decode_k=f.decode_k,
                interference=f.interference,
                rms_standalone=f.rms_standalone,
                rms_corun=f.rms_corun,
                k_by_config=k_by_config(mine),
            )
        else:
            entry.update(prefill_k=None, decode_k=None, interference=None)
        entry.update((per_model_extra or {}).get(model, {}))
        entry["samples"] = [sample_record(s, v) for s, v in speeds(mine)]
        per_model[model] = entry
    # The top-level numbers pool every model's samples, each still normalised within its own config.
    pooled = fit_contention(samples) if fitted else None
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "hardware": hardware,
        "device": device,
        "partitioning": partitioning,
        "prefill_k": pooled.prefill_k if pooled else None,
        "decode_k": pooled.decode_k if pooled else None,
        "interference": pooled.interference if pooled else None,
        "per_model": per_model,
        "measured_at": measured_at,
    }
    doc.update(extra or {})
    return doc


def sample_record(s: Sample, speed: float) -> dict[str, Any]:
    return {
        "phase": s.phase,
        "config": s.config,
        "share": s.share,
        "other_share": s.other_share,
        "sms": s.partition_sms,
        "other_sms": s.other_sms,
        "latency_s": s.latency_s,
        "reps": s.reps,
        "speed": speed,
    }
