"""Framing of the decode owner <-> prefill worker channel: JSON objects, one per line, on a unix socket.

It stands in for what CUDA IPC and ZMQ carry in the real engine: the worker announces itself
(`hello`), receives the shared-memory "handles" (`attached`), reports `ready` after its start-up
cost, then runs `prefill` batches and answers `prefill_done`.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

MAX_LINE = 1 << 20


async def send(writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
    writer.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
    await writer.drain()


async def receive(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    """The next message, or None when the peer closed the channel."""
    line = await reader.readline()
    if not line:
        return None
    doc = json.loads(line)
    if not isinstance(doc, dict) or "type" not in doc:
        raise ValueError(f"malformed IPC message {line[:80]!r}")
    return doc
