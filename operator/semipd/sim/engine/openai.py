"""OpenAI-compatible request parsing and response bodies for the simulated engine (pure functions).

Prompt length comes from, in order: the `prompt_tokens` extension field, a token-id list prompt, or
a crude word/punctuation count of the text. Generation always runs to `max_tokens` (the simulator
has no EOS; like `ignore_eos`), so `finish_reason` is "length".
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

COMPLETION = "completion"
CHAT = "chat"
CHAT_TEMPLATE_TOKENS_PER_MESSAGE = 4  # role markers and separators a chat template adds
_TOKEN_RE = re.compile(r"\w+|[^\w\s]")
_VOCAB = ("the", " model", " simulated", " token", " of", " a", " semi", "-PD", " engine", ".", " and", " it")


class BadRequest(ValueError):
    """A request the engine answers with 400."""


@dataclass(frozen=True)
class GenerationRequest:
    kind: str
    model: str
    prompt_tokens: int
    max_tokens: int
    stream: bool
    include_usage: bool


@dataclass(frozen=True)
class Limits:
    served_model: str
    context_length: int
    default_max_tokens: int


def count_text_tokens(text: str) -> int:
    return max(1, len(_TOKEN_RE.findall(text)))


def token_text(index: int) -> str:
    return _VOCAB[index % len(_VOCAB)]


def _int_field(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{name} must be an integer")
    return value


def _prompt_from_completion(prompt: Any) -> int:
    if isinstance(prompt, str):
        return count_text_tokens(prompt)
    if isinstance(prompt, list) and prompt:
        if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return len(prompt)
        if len(prompt) == 1:
            return _prompt_from_completion(prompt[0])
        raise BadRequest("batched prompts (a list of several prompts) are not supported; send one per request")
    raise BadRequest("prompt must be a string or a non-empty list of token ids")


def _prompt_from_chat(messages: Any) -> int:
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list")
    total = 0
    for msg in messages:
        if not isinstance(msg, dict) or "role" not in msg:
            raise BadRequest("each message must be an object with a role")
        content = msg.get("content", "")
        if isinstance(content, list):  # content parts: count the text ones
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        if not isinstance(content, str):
            raise BadRequest("message content must be a string or a list of parts")
        total += count_text_tokens(content) + CHAT_TEMPLATE_TOKENS_PER_MESSAGE
    return total


def parse_generation(body: Any, kind: str, limits: Limits) -> GenerationRequest:
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    explicit = _int_field(body, "prompt_tokens")
    if explicit is not None:
        prompt_tokens = explicit
    elif kind == COMPLETION:
        if "prompt" not in body:
            raise BadRequest("prompt is required")
        prompt_tokens = _prompt_from_completion(body["prompt"])
    else:
        prompt_tokens = _prompt_from_chat(body.get("messages"))
    if prompt_tokens < 1:
        raise BadRequest("the prompt must have at least one token")
    max_tokens = _int_field(body, "max_tokens")
    if max_tokens is None and kind == CHAT:
        max_tokens = _int_field(body, "max_completion_tokens")
    if max_tokens is None:
        max_tokens = limits.default_max_tokens
    if max_tokens < 1:
        raise BadRequest("max_tokens must be >= 1")
    n = body.get("n", 1)
    if n != 1:
        raise BadRequest("only n=1 is supported")
    if prompt_tokens + max_tokens > limits.context_length:
        raise BadRequest(
            f"prompt ({prompt_tokens}) + max_tokens ({max_tokens}) exceeds the context length {limits.context_length}"
        )
    model = body.get("model") or limits.served_model
    if model != limits.served_model:
        raise BadRequest(f"model {model!r} is not served here; this engine serves {limits.served_model!r}")
    options = body.get("stream_options") or {}
    return GenerationRequest(
        kind=kind,
        model=limits.served_model,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        stream=bool(body.get("stream", False)),
        include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
    )


def usage(req: GenerationRequest, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": req.prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": req.prompt_tokens + completion_tokens,
    }


def _object(req: GenerationRequest, chunk: bool) -> str:
    if req.kind == COMPLETION:
        return "text_completion"
    return "chat.completion.chunk" if chunk else "chat.completion"


def stream_chunk(req: GenerationRequest, rid: str, created: int, text: str, finish: str | None) -> dict[str, Any]:
    choice: dict[str, Any]
    if req.kind == COMPLETION:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
    else:
        choice = {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": finish}
    return {"id": rid, "object": _object(req, True), "created": created, "model": req.model, "choices": [choice]}


def stream_chunk_encoder(req: GenerationRequest, rid: str, created: int) -> Callable[[str, str | None], bytes]:
    """Compact JSON of `stream_chunk(req, rid, created, text, finish)` without re-encoding the
    constant parts for every token (the engine's hot path)."""
    text_mark, finish_mark = "\x00text\x00", "\x00finish\x00"
    template = json.dumps(stream_chunk(req, rid, created, text_mark, finish_mark), separators=(",", ":"))
    prefix, rest = template.split(json.dumps(text_mark))
    middle, suffix = rest.split(json.dumps(finish_mark))
    head, mid, tail = prefix.encode(), middle.encode(), suffix.encode()
    encoded: dict[str, bytes] = {}

    def encode(text: str, finish: str | None) -> bytes:
        piece = encoded.get(text)
        if piece is None:
            piece = encoded[text] = json.dumps(text).encode()
        return head + piece + mid + json.dumps(finish).encode() + tail

    return encode


def role_chunk(req: GenerationRequest, rid: str, created: int) -> dict[str, Any]:
    choice = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
    return {"id": rid, "object": _object(req, True), "created": created, "model": req.model, "choices": [choice]}


def usage_chunk(req: GenerationRequest, rid: str, created: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "id": rid,
        "object": _object(req, True),
        "created": created,
        "model": req.model,
        "choices": [],
        "usage": usage(req, completion_tokens),
    }


def full_response(req: GenerationRequest, rid: str, created: int, text: str, tokens: int) -> dict[str, Any]:
    choice: dict[str, Any]
    if req.kind == COMPLETION:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
    else:
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
    return {
        "id": rid,
        "object": _object(req, False),
        "created": created,
        "model": req.model,
        "choices": [choice],
        "usage": usage(req, tokens),
    }
