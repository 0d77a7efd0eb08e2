"""Workload traces: readers for the public LLM serving traces, synthetic arrivals, and time transforms.

Readers turn the Azure LLM 2023 CSVs and the Mooncake JSONL into typed request records (arrival
offset, input/output tokens, Mooncake's prefix-block ids). Everything here is pure; the load
generator replays the records over HTTP and the fleet simulator replays them as events.
"""

from __future__ import annotations

import csv
import json
import math
import os
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

BLOCK_TOKENS = 512
"""Tokens per Mooncake prefix block (hash_ids)."""

TRACE_DIR_ENV = "SEMIPD_TRACE_DIR"

KNOWN_TRACES: dict[str, str] = {
    "azure-code": "azure-llm-2023-code.csv",
    "azure-conv": "azure-llm-2023-conv.csv",
    "mooncake": "mooncake-conversation.jsonl",
}


class TraceFormatError(ValueError):
    """A trace file does not have the expected columns or values."""


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request: when it arrives (seconds from the trace start) and how many tokens it carries."""

    arrival_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()
    """Mooncake prefix-block ids (512 tokens each); equal ids mean a shared prefix. Empty if unknown."""


# --- readers --------------------------------------------------------------------------------------


def _parse_azure_timestamp(text: str) -> datetime:
    # "2023-11-16 18:17:03.9799600": seven fractional digits, more than datetime parses.
    date_time, _, frac = text.partition(".")
    stamp = datetime.strptime(date_time, "%Y-%m-%d %H:%M:%S")
    return stamp.replace(microsecond=int((frac + "000000")[:6])) if frac else stamp


def read_azure_csv(path: str | os.PathLike[str]) -> list[TraceRequest]:
    """Azure LLM inference trace 2023 (TIMESTAMP,ContextTokens,GeneratedTokens), arrivals rebased to 0."""
    rows: list[tuple[datetime, int, int]] = []
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        expected = {"TIMESTAMP", "ContextTokens", "GeneratedTokens"}
        if reader.fieldnames is None or not expected <= set(reader.fieldnames):
            raise TraceFormatError(f"{path}: expected columns {sorted(expected)}, got {reader.fieldnames}")
        for line, row in enumerate(reader, start=2):
            try:
                rows.append(
                    (_parse_azure_timestamp(row["TIMESTAMP"]), int(row["ContextTokens"]), int(row["GeneratedTokens"]))
                )
            except (TypeError, ValueError) as e:
                raise TraceFormatError(f"{path}:{line}: {e}") from e
    rows.sort(key=lambda r: r[0])
    if not rows:
        return []
    start = rows[0][0]
    return [TraceRequest((t - start).total_seconds(), inp, out) for t, inp, out in rows]


def read_mooncake_jsonl(path: str | os.PathLike[str]) -> list[TraceRequest]:
    """Mooncake trace (JSON lines: timestamp ms, input_length, output_length, hash_ids)."""
    out: list[TraceRequest] = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                out.append(
                    TraceRequest(
                        float(rec["timestamp"]) / 1000.0,
                        int(rec["input_length"]),
                        int(rec["output_length"]),
                        tuple(int(h) for h in rec.get("hash_ids", ())),
                    )
                )
            except (KeyError, TypeError, ValueError) as e:
                raise TraceFormatError(f"{path}:{line_no}: {e!r}") from e
    out.sort(key=lambda r: r.arrival_s)
    if out and out[0].arrival_s != 0.0:
        out = shift(out, -out[0].arrival_s)
    return out


def default_trace_dir() -> Path:
    env = os.environ.get(TRACE_DIR_ENV)
    if env:
        return Path(env)
    # The workspace keeps the shared traces next to the repository: <repo>/../shared/data/traces.
    return Path(__file__).resolve().parents[4] / "shared" / "data" / "traces"


def resolve_trace(name_or_path: str) -> Path:
    """A known trace name (azure-code, azure-conv, mooncake) or a file path."""
    if name_or_path in KNOWN_TRACES:
        return default_trace_dir() / KNOWN_TRACES[name_or_path]
    return Path(name_or_path)


def load_trace(name_or_path: str) -> list[TraceRequest]:
    """Read a trace by known name or path; the format follows the extension (.csv Azure, .jsonl Mooncake)."""
    path = resolve_trace(name_or_path)
    if path.suffix == ".csv":
        return read_azure_csv(path)
    if path.suffix in (".jsonl", ".json"):
        return read_mooncake_jsonl(path)
    raise TraceFormatError(f"{path}: unknown trace format (want .csv or .jsonl)")


# --- synthetic arrivals ---------------------------------------------------------------------------


def synthetic(
    rate: float,
    *,
    count: int | None = None,
    duration_s: float | None = None,
    cv: float = 1.0,
    input_tokens: int = 512,
    output_tokens: int = 128,
    lengths_from: Sequence[TraceRequest] | None = None,
    seed: int = 0,
) -> list[TraceRequest]:
    """Renewal-process arrivals at `rate` req/s: Poisson for cv = 1, gamma inter-arrivals otherwise.

    Bounded by `count` and/or `duration_s` (at least one is required). Token counts are fixed, or
    resampled (with the same seed) from `lengths_from`, e.g. a real trace's length distribution.
    """
    if rate <= 0 or not math.isfinite(rate):
        raise ValueError(f"rate must be positive, got {rate}")
    if cv <= 0:
        raise ValueError(f"cv must be positive, got {cv}")
    if count is None and duration_s is None:
        raise ValueError("synthetic arrivals need a count or a duration")
    if lengths_from is not None and not lengths_from:
        raise ValueError("lengths_from is empty")
    rng = random.Random(seed)
    shape = 1.0 / (cv * cv)
    scale = 1.0 / (rate * shape)
    out: list[TraceRequest] = []
    t = 0.0
    while count is None or len(out) < count:
        t += rng.gammavariate(shape, scale)
        if duration_s is not None and t >= duration_s:
            break
        if lengths_from is not None:
            src = lengths_from[rng.randrange(len(lengths_from))]
            out.append(TraceRequest(t, src.input_tokens, src.output_tokens, src.hash_ids))
        else:
            out.append(TraceRequest(t, input_tokens, output_tokens))
    return out


# --- transforms -----------------------------------------------------------------------------------


def shift(requests: Iterable[TraceRequest], offset_s: float) -> list[TraceRequest]:
    return [replace(r, arrival_s=r.arrival_s + offset_s) for r in requests]


def compress_time(requests: Iterable[TraceRequest], factor: float) -> list[TraceRequest]:
    """Replay `factor` times faster: arrivals divide by factor, so the rate multiplies by it."""
    if factor <= 0:
        raise ValueError(f"factor must be positive, got {factor}")
    return [replace(r, arrival_s=r.arrival_s / factor) for r in requests]


def mean_rate(requests: Sequence[TraceRequest]) -> float:
    """Requests per second over the span from the first to the last arrival."""
    if len(requests) < 2:
        return 0.0
    span = requests[-1].arrival_s - requests[0].arrival_s
    return (len(requests) - 1) / span if span > 0 else math.inf


def scale_to_rate(requests: Sequence[TraceRequest], rate: float) -> list[TraceRequest]:
    """Compress or stretch time so the mean arrival rate becomes `rate` req/s (burst shape kept)."""
    current = mean_rate(requests)
    if not math.isfinite(current) or current <= 0:
        raise ValueError("trace needs at least two requests at distinct times to be rate-scaled")
    return compress_time(requests, rate / current)


def window(requests: Sequence[TraceRequest], start_s: float, duration_s: float) -> list[TraceRequest]:
    """Requests arriving in [start_s, start_s + duration_s), rebased to start at 0."""
    end = start_s + duration_s
    return [replace(r, arrival_s=r.arrival_s - start_s) for r in requests if start_s <= r.arrival_s < end]


def clip_lengths(
    requests: Iterable[TraceRequest], max_input: int | None = None, max_output: int | None = None
) -> list[TraceRequest]:
    """Cap token counts (e.g. to a model's context); hash_ids are cut to the blocks still covered."""
    out = []
    for r in requests:
        inp = r.input_tokens if max_input is None else min(r.input_tokens, max_input)
        outp = r.output_tokens if max_output is None else min(r.output_tokens, max_output)
        blocks = r.hash_ids[: math.ceil(inp / BLOCK_TOKENS)] if r.hash_ids else ()
        out.append(TraceRequest(r.arrival_s, inp, outp, blocks))
    return out


def block_reuse_fraction(requests: Iterable[TraceRequest]) -> float:
    """Share of prefix blocks already seen earlier in the trace (the hit rate of an infinite cache)."""
    seen: set[int] = set()
    total = reused = 0
    for r in requests:
        for h in r.hash_ids:
            total += 1
            if h in seen:
                reused += 1
            else:
                seen.add(h)
    return reused / total if total else 0.0
