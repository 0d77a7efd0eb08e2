"""Readers for the public LLM serving traces, and where the shipped copies live.

They turn the Azure LLM 2023 CSVs and the Mooncake JSONL (plain or gzip) into typed request records
(arrival offset, input/output tokens, Mooncake's prefix-block ids). The three traces ship in the
package (semipd/data/traces, read through importlib.resources); `SEMIPD_TRACE_DIR` overrides them.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
from dataclasses import dataclass, replace
from datetime import datetime
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import IO

BLOCK_TOKENS = 512
"""Tokens per Mooncake prefix block (hash_ids)."""

TRACE_DIR_ENV = "SEMIPD_TRACE_DIR"

KNOWN_TRACES: dict[str, str] = {
    "azure-code": "azure-llm-2023-code.csv.gz",
    "azure-conv": "azure-llm-2023-conv.csv.gz",
    "mooncake": "mooncake-conversation.jsonl.gz",
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


TracePath = str | os.PathLike[str] | Traversable


def _open_text(path: TracePath) -> IO[str]:
    raw: IO[bytes] = path.open("rb") if isinstance(path, Traversable) else open(path, "rb")  # noqa: SIM115
    stream: IO[bytes] = gzip.GzipFile(fileobj=raw) if _name(path).endswith(".gz") else raw  # type: ignore[assignment]
    return io.TextIOWrapper(stream, encoding="utf-8", newline="")


def _name(path: TracePath) -> str:
    return path.name if isinstance(path, Traversable) else os.fspath(path)


def _format(path: TracePath) -> str:
    name = _name(path).removesuffix(".gz")
    return name.rsplit(".", 1)[-1] if "." in name else ""


def _parse_azure_timestamp(text: str) -> datetime:
    # "2023-11-16 18:17:03.9799600": seven fractional digits, more than datetime parses.
    date_time, _, frac = text.partition(".")
    stamp = datetime.strptime(date_time, "%Y-%m-%d %H:%M:%S")
    return stamp.replace(microsecond=int((frac + "000000")[:6])) if frac else stamp


def read_azure_csv(path: TracePath) -> list[TraceRequest]:
    """Azure LLM inference trace 2023 (TIMESTAMP,ContextTokens,GeneratedTokens), arrivals rebased to 0."""
    rows: list[tuple[datetime, int, int]] = []
    with _open_text(path) as f:
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


def read_mooncake_jsonl(path: TracePath) -> list[TraceRequest]:
    """Mooncake trace (JSON lines: timestamp ms, input_length, output_length, hash_ids)."""
    out: list[TraceRequest] = []
    with _open_text(path) as f:
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
        t0 = out[0].arrival_s
        out = [replace(r, arrival_s=r.arrival_s - t0) for r in out]
    return out


def default_trace_dir() -> Traversable:
    """`SEMIPD_TRACE_DIR` when set, else the copies shipped in the package."""
    env = os.environ.get(TRACE_DIR_ENV)
    if env:
        return Path(env)
    return resources.files("semipd.data") / "traces"


def resolve_trace(name_or_path: str) -> TracePath:
    """A known trace name (azure-code, azure-conv, mooncake) or a file path."""
    if name_or_path in KNOWN_TRACES:
        return default_trace_dir() / KNOWN_TRACES[name_or_path]
    return Path(name_or_path)


def load_trace(name_or_path: str) -> list[TraceRequest]:
    """Read a trace by known name or path; the format follows the extension (.csv Azure, .jsonl Mooncake, .gz)."""
    path = resolve_trace(name_or_path)
    fmt = _format(path)
    if fmt not in ("csv", "jsonl", "json"):
        raise TraceFormatError(f"{_name(path)}: unknown trace format (want .csv or .jsonl, optionally .gz)")
    if isinstance(path, Path) and not path.is_file():
        raise TraceFormatError(f"{path}: no such trace file (known names: {', '.join(KNOWN_TRACES)})")
    return read_azure_csv(path) if fmt == "csv" else read_mooncake_jsonl(path)
