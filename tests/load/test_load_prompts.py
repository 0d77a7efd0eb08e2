"""Request bodies and prompt text for replayed trace requests."""

from __future__ import annotations

from semipd.load.prompts import PROMPT_TOKENS_FIELD, completion_body, prompt_text
from semipd.traces import TraceRequest


def test_prompt_has_about_the_requested_number_of_words() -> None:
    for n in (1, 5, 100, 513, 4096, 9000):
        words = len(prompt_text(TraceRequest(0.0, n, 1), index=7).split())
        assert abs(words - n) <= 3, n


def test_prompts_without_prefix_identity_share_no_prefix() -> None:
    a = prompt_text(TraceRequest(0.0, 200, 1), index=1)
    b = prompt_text(TraceRequest(0.0, 200, 1), index=2)
    assert a != b
    assert a.split()[:2] != b.split()[:2]


def test_prompts_sharing_mooncake_blocks_share_their_text() -> None:
    long = prompt_text(TraceRequest(0.0, 1300, 1, (0, 1, 2)), index=1)
    short = prompt_text(TraceRequest(0.0, 1024, 1, (0, 1)), index=2)
    other = prompt_text(TraceRequest(0.0, 1024, 1, (0, 9)), index=3)
    assert len(long.split()) == 1300
    assert long.startswith(short)
    assert other.split()[:512] == long.split()[:512]
    assert other.split()[512:1024] != long.split()[512:1024]


def test_completion_body_streams_exact_lengths_with_extension_field() -> None:
    body = completion_body(TraceRequest(0.0, 321, 17), 0, "llama")
    assert body["model"] == "llama"
    assert body["max_tokens"] == 17
    assert body["stream"] is True
    assert body["ignore_eos"] is True
    assert body[PROMPT_TOKENS_FIELD] == 321
    assert PROMPT_TOKENS_FIELD == "prompt_tokens"
    plain = completion_body(TraceRequest(0.0, 321, 0), 0, "llama", mode="stub", extensions=False, ignore_eos=False)
    assert PROMPT_TOKENS_FIELD not in plain
    assert "ignore_eos" not in plain
    assert plain["max_tokens"] == 1  # traces hold a few zero-length outputs
    assert plain["prompt"] == "request 0"
