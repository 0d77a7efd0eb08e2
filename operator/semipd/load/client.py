"""One streaming OpenAI /v1/completions request over httpx, timed chunk by chunk.

Reads the server-sent events, timestamps every content chunk, and classifies the outcome: ok,
HTTP error, transport error, timeout, or truncated (stream ended early, no [DONE], or fewer tokens
than requested with ignore_eos).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from semipd.load.stats import RequestResult, Status


@dataclass(slots=True)
class _StreamState:
    first_at: float | None = None
    last_at: float | None = None
    chunks: int = 0
    usage_tokens: int | None = None
    finish_reason: str | None = None
    done: bool = False
    error: str | None = None


def _consume_event(data: str, now: float, state: _StreamState, gaps: list[float]) -> None:
    if data == "[DONE]":
        state.done = True
        return
    try:
        event: Any = json.loads(data)
    except json.JSONDecodeError as e:
        state.error = f"bad SSE JSON: {e}"
        return
    if not isinstance(event, dict):
        state.error = "SSE event is not an object"
        return
    if "error" in event:
        state.error = f"server error event: {event['error']}"
        return
    usage = event.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        state.usage_tokens = usage["completion_tokens"]
    choices = event.get("choices")
    if not choices:
        return
    choice = choices[0]
    text = choice.get("text")
    if text is None:  # chat-style delta
        text = (choice.get("delta") or {}).get("content")
    if text:
        prev = state.last_at
        if prev is None:
            state.first_at = now
        else:
            gaps.append(now - prev)
        state.last_at = now
        state.chunks += 1
    if choice.get("finish_reason"):
        state.finish_reason = choice["finish_reason"]


async def stream_completion(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    *,
    index: int,
    endpoint: str,
    scheduled_at_s: float,
    run_start: float,
    input_tokens: int,
    timeout_s: float,
    require_full_length: bool,
) -> RequestResult:
    """Send `body` and time the stream. Never raises for request failures: they become the result's status."""
    sent = time.perf_counter()
    max_tokens = int(body.get("max_tokens", 0))
    state = _StreamState()
    gaps: list[float] = []
    status: Status = "ok"
    http_status: int | None = None
    error: str | None = None
    end = sent
    try:
        async with asyncio.timeout(timeout_s), client.stream("POST", url, json=body) as resp:
            http_status = resp.status_code
            if resp.status_code != 200:
                raw = await resp.aread()
                status, error = "http_error", raw[:300].decode("utf-8", "replace")
            else:
                async for line in resp.aiter_lines():
                    if line.startswith("data:"):
                        _consume_event(line[5:].strip(), time.perf_counter(), state, gaps)
                        if state.error:
                            break
                end = time.perf_counter()
    except TimeoutError:
        status, error = "timeout", f"no complete response within {timeout_s} s"
    except httpx.HTTPError as e:
        status, error = "error", f"{type(e).__name__}: {e}"
    if status == "ok":
        tokens = state.usage_tokens if state.usage_tokens is not None else state.chunks
        if state.error:
            status, error = "error", state.error
        elif not state.done or state.first_at is None:
            status, error = "truncated", "stream ended without [DONE]" if not state.done else "no tokens"
        elif require_full_length and tokens < max_tokens:
            status, error = "truncated", f"{tokens} of {max_tokens} tokens (finish_reason={state.finish_reason})"
    else:
        tokens = state.usage_tokens if state.usage_tokens is not None else state.chunks
    return RequestResult(
        index=index,
        endpoint=endpoint,
        scheduled_at_s=scheduled_at_s,
        sent_at_s=sent - run_start,
        input_tokens=input_tokens,
        max_tokens=max_tokens,
        status=status,
        output_tokens=tokens,
        ttft_s=None if state.first_at is None else state.first_at - sent,
        e2e_s=end - sent if status == "ok" else None,
        itl_s=tuple(gaps),
        http_status=http_status,
        error=error,
    )
