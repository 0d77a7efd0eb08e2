"""The performance model: hardware and model profiles, step latency, contention, KV capacity, MoE routing.

The ground floor under both the policy (its prior) and the simulator (its ground truth). It imports
nothing of ours; see docs/architecture.md for the layering rule.
"""

from semipd.perf.contention import (
    SHARE_CURVES,
    TAKE_TURNS,
    ContentionModel,
    contended_shares,
    contention_from_json,
    load_contention,
    share_speed,
)
from semipd.perf.latency import LatencyModel, ModelFitError
from semipd.perf.profiles import GB, HARDWARE, MODELS, HardwareProfile, ModelProfile

__all__ = [
    "GB",
    "HARDWARE",
    "MODELS",
    "SHARE_CURVES",
    "TAKE_TURNS",
    "ContentionModel",
    "HardwareProfile",
    "LatencyModel",
    "ModelFitError",
    "ModelProfile",
    "contended_shares",
    "contention_from_json",
    "load_contention",
    "share_speed",
]
