"""OpenAI request parsing and response shapes of the simulated engine (pure)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from semipd.sim.engine.openai import (
    CHAT,
    CHAT_TEMPLATE_TOKENS_PER_MESSAGE,
    COMPLETION,
    BadRequest,
    Limits,
    count_text_tokens,
    full_response,
    parse_generation,
    stream_chunk,
    stream_chunk_encoder,
    usage_chunk,
)

LIMITS = Limits("llama-3-8b", 8192, 128)


def parse(body: Any, kind: str = COMPLETION):  # type: ignore[no-untyped-def]
    return parse_generation(body, kind, LIMITS)


def test_prompt_length_sources_in_priority_order() -> None:
    assert parse({"prompt": "a b c", "prompt_tokens": 700}).prompt_tokens == 700
    assert parse({"prompt": [1, 2, 3, 4]}).prompt_tokens == 4
    assert parse({"prompt": [[5, 6]]}).prompt_tokens == 2
    assert parse({"prompt": "Hello, world!"}).prompt_tokens == 4
    chat = parse({"messages": [{"role": "user", "content": "one two"}]}, CHAT)
    assert chat.prompt_tokens == 2 + CHAT_TEMPLATE_TOKENS_PER_MESSAGE


def test_max_tokens_default_and_chat_alias() -> None:
    assert parse({"prompt": "x"}).max_tokens == 128
    assert parse({"prompt": "x", "max_tokens": 7}).max_tokens == 7
    body = {"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 9}
    assert parse(body, CHAT).max_tokens == 9


def test_stream_flags() -> None:
    req = parse({"prompt": "x", "stream": True, "stream_options": {"include_usage": True}})
    assert (req.stream, req.include_usage) == (True, True)
    assert parse({"prompt": "x"}).stream is False


@pytest.mark.parametrize(
    ("body", "kind", "message"),
    [
        ([], COMPLETION, "JSON object"),
        ({}, COMPLETION, "prompt is required"),
        ({"prompt": 5}, COMPLETION, "prompt must be"),
        ({"prompt": ["a", "b"]}, COMPLETION, "batched prompts"),
        ({"prompt": "x", "max_tokens": 0}, COMPLETION, "max_tokens must be >= 1"),
        ({"prompt": "x", "max_tokens": "5"}, COMPLETION, "max_tokens must be an integer"),
        ({"prompt": "x", "prompt_tokens": 8000, "max_tokens": 500}, COMPLETION, "exceeds the context length 8192"),
        ({"prompt": "x", "n": 2}, COMPLETION, "only n=1"),
        ({"prompt": "x", "model": "gpt-4"}, COMPLETION, "not served here"),
        ({"messages": []}, CHAT, "non-empty list"),
        ({"messages": [{"content": "x"}]}, CHAT, "with a role"),
        ({"prompt": "x", "prompt_tokens": 0}, COMPLETION, "at least one token"),
    ],
)
def test_bad_requests(body: Any, kind: str, message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        parse(body, kind)


def test_text_token_count_is_positive_and_grows() -> None:
    assert count_text_tokens("") == 1
    assert count_text_tokens("a " * 100) == 100


def test_response_shapes() -> None:
    comp = parse({"prompt": [1, 2, 3], "max_tokens": 2})
    full = full_response(comp, "cmpl-1", 0, "ab", 2)
    assert full["object"] == "text_completion"
    assert full["choices"][0] == {"index": 0, "text": "ab", "logprobs": None, "finish_reason": "length"}
    assert full["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    chat = parse({"messages": [{"role": "user", "content": "x"}]}, CHAT)
    chunk = stream_chunk(chat, "c", 0, " tok", None)
    assert chunk["object"] == "chat.completion.chunk"
    assert chunk["choices"][0]["delta"] == {"content": " tok"}
    assert usage_chunk(chat, "c", 0, 4)["choices"] == []
    assert full_response(chat, "c", 0, "hi", 1)["choices"][0]["message"] == {"role": "assistant", "content": "hi"}


@pytest.mark.parametrize("kind", [COMPLETION, CHAT])
@pytest.mark.parametrize(("text", "finish"), [(" tok", None), ('q"uo\\te', "length"), ("é", None)])
def test_fast_chunk_encoder_matches_plain_json(kind: str, text: str, finish: str | None) -> None:
    body: dict[str, Any] = {"prompt": "x"} if kind == COMPLETION else {"messages": [{"role": "user", "content": "x"}]}
    req = parse(body, kind)
    expected = json.dumps(stream_chunk(req, "id-1", 1700000000, text, finish), separators=(",", ":")).encode()
    assert stream_chunk_encoder(req, "id-1", 1700000000)(text, finish) == expected
