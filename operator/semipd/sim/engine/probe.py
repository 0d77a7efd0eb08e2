"""A strict streaming client for the simulated engine: every request and every token is accounted for.

Used by component tests and benchmarks to prove that nothing fails or is truncated: a stream counts
as complete only with exactly `max_tokens` content chunks, finish_reason "length" on the last one,
a usage chunk that agrees, and the closing `[DONE]`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import aiohttp


@dataclass(frozen=True)
class StreamResult:
    ok: bool
    expected_tokens: int
    tokens: int
    ttft: float
    e2e: float
    error: str | None = None


async def stream_completion(
    session: aiohttp.ClientSession,
    base_url: str,
    prompt_tokens: int,
    max_tokens: int,
    chat: bool = False,
    timeout: float = 120.0,
) -> StreamResult:
    body: dict[str, object] = {
        "prompt_tokens": prompt_tokens,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    if chat:
        body["messages"] = [{"role": "user", "content": "x"}]
        path = "/v1/chat/completions"
    else:
        body["prompt"] = "x"
        path = "/v1/completions"
    start = time.monotonic()
    ttft = -1.0
    tokens = 0
    finish = None
    usage_tokens = None
    done = False
    try:
        async with session.post(base_url + path, json=body, timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            if resp.status != 200:
                text = await resp.text()
                return StreamResult(False, max_tokens, 0, -1.0, time.monotonic() - start, f"HTTP {resp.status}: {text}")
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data: "):
                    continue
                payload = line[6:]
                if payload == b"[DONE]":
                    done = True
                    break
                doc = json.loads(payload)
                if doc.get("usage"):
                    usage_tokens = doc["usage"]["completion_tokens"]
                for choice in doc.get("choices", []):
                    piece = choice.get("text") if not chat else choice.get("delta", {}).get("content")
                    if piece:
                        if tokens == 0:
                            ttft = time.monotonic() - start
                        tokens += 1
                    if choice.get("finish_reason"):
                        finish = choice["finish_reason"]
    except (aiohttp.ClientError, TimeoutError, ValueError) as e:
        return StreamResult(False, max_tokens, tokens, ttft, time.monotonic() - start, f"{type(e).__name__}: {e}")
    e2e = time.monotonic() - start
    problems = []
    if tokens != max_tokens:
        problems.append(f"{tokens} of {max_tokens} tokens")
    if finish != "length":
        problems.append(f"finish_reason {finish!r}")
    if usage_tokens != max_tokens:
        problems.append(f"usage says {usage_tokens}")
    if not done:
        problems.append("no [DONE]")
    return StreamResult(not problems, max_tokens, tokens, ttft, e2e, "; ".join(problems) or None)
