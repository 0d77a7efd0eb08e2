"""Request bodies for replayed trace requests: prompt text of about the trace's token count.

Real engines tokenize the text, so it is built from common English words that are one token each in
Llama/Qwen-style vocabularies. Prompts of requests sharing Mooncake prefix blocks share the text of
those blocks, so a real prefix cache sees the trace's reuse; other prompts start with a per-request
marker so they share nothing. The simulated engine reads the exact count from an extension field.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Literal

from semipd.traces import BLOCK_TOKENS, TraceRequest

PROMPT_TOKENS_FIELD = "prompt_tokens"
"""Extension field carrying the intended prompt token count (read by the simulated engine)."""

PromptText = Literal["full", "stub"]

_WORD_TEXT = (
    "the of and to in is was for on that with as by at from his her they this be are an it not or "
    "have had which one you were all we can there been if more when will would who so no out up "
    "into than them only some time could new about two may then do first any my now such like our "
    "over man me even most made after also did many before must through back years where much way "
    "well down should because each just those people how too little state good very make world still "
    "own see men work long get here between both life being under never day same another know while "
    "last might us great old year off come since against go came right used take three"
)
_WORDS = _WORD_TEXT.split()


def _words(seed: int, n: int) -> str:
    # Deterministic word sequence: a Weyl walk over the vocabulary, one start per seed.
    v = len(_WORDS)
    start = (seed * 2654435761) % v
    step = 1 + (seed % (v - 1))
    return " ".join(_WORDS[(start + j * step) % v] for j in range(n))


@lru_cache(maxsize=4096)
def _block_text(block_id: int) -> str:
    return _words(block_id + 1, BLOCK_TOKENS)


@lru_cache(maxsize=64)
def _filler(n: int) -> str:
    return _words(0, n)


def prompt_text(req: TraceRequest, index: int, mode: PromptText = "full") -> str:
    """About `req.input_tokens` tokens of text ("stub": a short marker only, for the simulated engine)."""
    if mode == "stub":
        return f"request {index}"
    n = max(1, req.input_tokens)
    if req.hash_ids:
        parts = [_block_text(h) for h in req.hash_ids[:-1]]
        tail = n - BLOCK_TOKENS * (len(req.hash_ids) - 1)
        if tail > 0:
            parts.append(_block_text(req.hash_ids[-1]) if tail >= BLOCK_TOKENS else _words(req.hash_ids[-1] + 1, tail))
        return " ".join(parts)
    marker = f"request {index}:"
    rest = max(0, n - 3)
    # Round the cached filler length up to a power of two so the cache stays small, then cut words.
    size = 1 << max(0, rest - 1).bit_length()
    filler = _filler(size)
    if size != rest:
        filler = " ".join(filler.split(" ", rest)[:rest]) if rest else ""
    return f"{marker} {filler}" if filler else marker


def completion_body(
    req: TraceRequest,
    index: int,
    model: str,
    *,
    mode: PromptText = "full",
    extensions: bool = True,
    ignore_eos: bool = True,
    prompt_tokens_field: str = PROMPT_TOKENS_FIELD,
) -> dict[str, Any]:
    """OpenAI /v1/completions streaming body for one trace request."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompt_text(req, index, mode),
        "max_tokens": max(1, req.output_tokens),
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.0,
    }
    if ignore_eos:
        body["ignore_eos"] = True
    if extensions:
        body[prompt_tokens_field] = max(1, req.input_tokens)
    return body
