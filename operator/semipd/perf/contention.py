"""How the prefill and decode workers share one device while both run kernels.

The performance model's contention term, as an explicit, parameterised model (docs/latency-model.md,
"Contention"). Two forms:

- take turns (`TAKE_TURNS`, the legacy model): MPS caps that sum past the device are normalised
  (Semi-PD's x/(x+y)), each phase then runs the roofline at its normalised share, decode's memory
  time follows Semi-PD's fitted TPOT curve and is inflated by the profile's colocation beta while a
  prefill runs. The two phases' combined progress never exceeds one device.
- share curves (`SHARE_CURVES`, any other parameters): after the same normalisation, a phase alone
  at share s runs at speed g(s, k) = s / (s + k(1 - s)) of its whole-device speed, and while the
  other phase runs at share o it loses a further fraction `interference * o` (shared HBM and L2).
  k = 1, interference 1 is the pessimistic end; k = 0, interference 0 is ideal overlap.

Parameters can come from the GPU calibration harness (bench/gpu) through `load_contention`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONTENTION_SCHEMA = "semipd.io/contention/v1"
PARTITIONINGS = ("green-context", "mps", "streams")

PREFILL_K_RANGE = (0.0, 1.0)
DECODE_K_RANGE = (0.0, 1.0)
INTERFERENCE_RANGE = (0.0, 1.0)
"""Ranges a parameter may take at all; the sourced ranges (docs/latency-model.md) are narrower:
k_p 0.4-1.0, k_d 0.1-0.6, interference 0-0.5."""


def contended_shares(prefill_share: float, decode_share: float) -> tuple[float, float]:
    """Effective (prefill, decode) shares while both workers run kernels at the same time.

    MPS caps each process at its percentage; when the caps sum past the whole device the two
    processes split the SMs in proportion to their caps (Semi-PD evaluates its fits on the same
    normalised shares x/(x+y), y/(x+y)). Caps that fit side by side are granted as they are.
    """
    total = prefill_share + decode_share
    if total <= 1.0:
        return prefill_share, decode_share
    return prefill_share / total, decode_share / total


def share_speed(share: float, k: float) -> float:
    """g(s, k) = s / (s + k(1 - s)): a phase's speed at share s alone, relative to the whole device.

    The same form as Semi-PD's T(s) = T(1)[(1 - k) + k/s]: k is the part of the solo time that
    scales like 1/SMs."""
    return share / (share + k * (1.0 - share))


@dataclass(frozen=True, slots=True)
class ContentionModel:
    """The contention parameters of one device (see the module docstring for the two forms)."""

    prefill_k: float = 0.6
    """k of prefill's standalone share curve. Default: mid of MuxServe (A100, 0.34-0.71) and SGLang's
    PD-Multiplexing predictor (H800 0.40-0.42, A100 0.55-0.81) [fit]; range 0.4-1.0."""
    decode_k: float = 0.2
    """k of decode's standalone share curve at batch <= 64. SGLang predictor 0.09-0.21, MuxServe
    0.02-0.26 at batch <= 32 [fit]; range 0.1-0.6 (about 0.5 at batch >= 128 or long contexts)."""
    interference: float = 0.2
    """Co-run loss per unit of the other phase's share (shared HBM/L2): nobody publishes it
    [est]; 0.2 puts the combined progress at 50/50-70/30 at about POD-Attention's 1.33x average
    (measured); range 0-0.5."""
    take_turns: bool = False
    """The legacy model (module docstring); the three numbers are then unused."""

    def __post_init__(self) -> None:
        for name, value, (lo, hi) in (
            ("prefill_k", self.prefill_k, PREFILL_K_RANGE),
            ("decode_k", self.decode_k, DECODE_K_RANGE),
            ("interference", self.interference, INTERFERENCE_RANGE),
        ):
            if not (isinstance(value, int | float) and math.isfinite(value) and lo <= value <= hi):
                raise ValueError(f"contention {name} must be a number in [{lo}, {hi}], got {value!r}")

    def speeds(self, prefill_share: float, decode_share: float | None) -> tuple[float, float]:
        """(prefill, decode) speeds relative to each phase alone on the whole device (share curves).

        `decode_share` None: prefill runs alone at its cap; then the decode speed is meaningless (0)."""
        if decode_share is None:
            return share_speed(prefill_share, self.prefill_k), 0.0
        x, y = contended_shares(prefill_share, decode_share)
        eps = self.interference
        return share_speed(x, self.prefill_k) * (1.0 - eps * y), share_speed(y, self.decode_k) * (1.0 - eps * x)

    def decode_speed(self, decode_share: float, prefill_share: float | None) -> float:
        """Decode's speed relative to decode alone on the whole device (share curves)."""
        if prefill_share is None:
            return share_speed(decode_share, self.decode_k)
        return self.speeds(prefill_share, decode_share)[1]

    def combined_progress(self, prefill_share: float, decode_share: float) -> float:
        """Both phases' progress in whole-device units while co-running (1.0 = taking turns)."""
        p, d = self.speeds(prefill_share, decode_share)
        return p + d

    def label(self) -> str:
        if self.take_turns:
            return "take-turns"
        return f"k_p={self.prefill_k:g} k_d={self.decode_k:g} eps={self.interference:g}"

    @classmethod
    def parse(cls, text: str) -> ContentionModel:
        """ "take-turns" or "k_p,k_d,eps" (the CLI's --contention)."""
        if text.strip().lower() in ("take-turns", "legacy"):
            return TAKE_TURNS
        parts = text.split(",")
        if len(parts) != 3:
            raise ValueError(f"--contention wants 'take-turns' or k_p,k_d,eps (three numbers), got {text!r}")
        try:
            k_p, k_d, eps = (float(p) for p in parts)
        except ValueError:
            raise ValueError(f"--contention wants three numbers k_p,k_d,eps, got {text!r}") from None
        return cls(k_p, k_d, eps)


SHARE_CURVES = ContentionModel()
"""The sourced defaults (k_p 0.6, k_d 0.2, interference 0.2)."""
TAKE_TURNS = ContentionModel(take_turns=True)
"""Today's (legacy) model: proportional sharing, Semi-PD's TPOT curve and the colocation beta."""


def contention_from_json(doc: Any, where: str = "contention parameters") -> ContentionModel:
    """Parameters from a document the GPU calibration harness wrote (schema semipd.io/contention/v1).

    Only the top-level prefill_k, decode_k and interference are read; `per_model` is ignored."""
    if not isinstance(doc, dict):
        raise ValueError(f"{where}: want a JSON object, got {type(doc).__name__}")
    if doc.get("schema") != CONTENTION_SCHEMA:
        raise ValueError(f"{where}: schema must be {CONTENTION_SCHEMA!r}, got {doc.get('schema')!r}")
    part = doc.get("partitioning")
    if part is not None and part not in PARTITIONINGS:
        raise ValueError(f"{where}: partitioning must be one of {PARTITIONINGS}, got {part!r}")
    values = []
    for key in ("prefill_k", "decode_k", "interference"):
        if key not in doc:
            raise ValueError(f"{where}: missing {key!r}")
        v = doc[key]
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ValueError(f"{where}: {key} must be a number, got {v!r}")
        values.append(float(v))
    try:
        return ContentionModel(values[0], values[1], values[2])
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def load_contention(path: str | Path) -> ContentionModel:
    """`contention_from_json` of a file; a clear error naming the file when it cannot be read."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except OSError as e:
        raise ValueError(f"{p}: cannot read contention parameters: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: not JSON: {e}") from None
    return contention_from_json(doc, str(p))
