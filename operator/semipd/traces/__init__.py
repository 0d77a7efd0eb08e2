"""Workload traces: the shipped public traces, synthetic arrivals, transforms and fleet-run preparation.

Shared by the load generator (replays over HTTP) and the fleet simulator (replays as events), so it
imports nothing but the standard library and semipd.data.
"""

from semipd.traces.readers import (
    BLOCK_TOKENS,
    KNOWN_TRACES,
    TRACE_DIR_ENV,
    TraceFormatError,
    TraceRequest,
    default_trace_dir,
    load_trace,
    read_azure_csv,
    read_mooncake_jsonl,
    resolve_trace,
)
from semipd.traces.synthetic import synthetic
from semipd.traces.transforms import (
    block_reuse_fraction,
    clip_lengths,
    compress_time,
    mean_rate,
    scale_to_rate,
    shift,
    window,
)
from semipd.traces.workload import day_shape, diurnal, mix_shift, prepare

__all__ = [
    "BLOCK_TOKENS",
    "KNOWN_TRACES",
    "TRACE_DIR_ENV",
    "TraceFormatError",
    "TraceRequest",
    "block_reuse_fraction",
    "clip_lengths",
    "compress_time",
    "day_shape",
    "default_trace_dir",
    "diurnal",
    "load_trace",
    "mean_rate",
    "mix_shift",
    "prepare",
    "read_azure_csv",
    "read_mooncake_jsonl",
    "resolve_trace",
    "scale_to_rate",
    "shift",
    "synthetic",
    "window",
]
