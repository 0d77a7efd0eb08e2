"""Trace readers on the real shared trace files, and the pure arrival transforms."""

from __future__ import annotations

import itertools
import math
import statistics
from pathlib import Path

import pytest

from semipd.traces import (
    TraceFormatError,
    TraceRequest,
    block_reuse_fraction,
    clip_lengths,
    compress_time,
    default_trace_dir,
    load_trace,
    mean_rate,
    read_azure_csv,
    read_mooncake_jsonl,
    scale_to_rate,
    synthetic,
    window,
)

TRACES = default_trace_dir()


def pct(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# Counts from the traces README; duration, rate and token statistics from the latency-model reference.
REAL = [
    ("azure-code", 8_819, 57.3 * 60, 2.57, (2048, 1469, 7436), (28, 13, 249)),
    ("azure-conv", 19_366, 58.4 * 60, 5.53, (1155, 1020, 4142), (211, 129, 601)),
    ("mooncake", 12_031, 3537.0, None, (12035, 6909, 85399), (343, 350, 1115)),
]


@pytest.mark.parametrize(("name", "count", "duration", "rate", "inp", "out"), REAL)
def test_real_trace_matches_published_statistics(
    name: str,
    count: int,
    duration: float,
    rate: float | None,
    inp: tuple[int, int, int],
    out: tuple[int, int, int],
) -> None:
    reqs = load_trace(name)
    assert len(reqs) == count
    assert reqs[0].arrival_s == 0.0
    assert all(a.arrival_s <= b.arrival_s for a, b in itertools.pairwise(reqs))
    assert reqs[-1].arrival_s == pytest.approx(duration, rel=0.002)
    if rate is not None:
        assert mean_rate(reqs) == pytest.approx(rate, rel=0.005)
    ins = [r.input_tokens for r in reqs]
    outs = [r.output_tokens for r in reqs]
    assert statistics.mean(ins) == pytest.approx(inp[0], rel=0.005)
    assert pct(ins, 0.5) == pytest.approx(inp[1], rel=0.005)
    assert pct(ins, 0.99) == pytest.approx(inp[2], rel=0.02)
    assert statistics.mean(outs) == pytest.approx(out[0], rel=0.02)
    assert pct(outs, 0.5) == pytest.approx(out[1], rel=0.005)
    assert pct(outs, 0.99) == pytest.approx(out[2], rel=0.02)


def test_mooncake_prefix_blocks_cover_the_prompt_and_reuse_matches_reference() -> None:
    reqs = load_trace("mooncake")
    assert all(len(r.hash_ids) == math.ceil(r.input_tokens / 512) for r in reqs)
    assert block_reuse_fraction(reqs) == pytest.approx(0.366, abs=0.002)
    assert reqs[0].hash_ids[:3] == (0, 1, 2)


def test_azure_traces_have_no_prefix_identity() -> None:
    assert all(r.hash_ids == () for r in load_trace("azure-code")[:100])


def test_azure_reader_parses_seven_digit_fractions_and_sorts(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:17:05.5000000,10,2\n"
        "2023-11-16 18:17:03.9799600,4808,10\n"
        "2023-11-16 18:17:04,3180,8\n"
    )
    reqs = read_azure_csv(p)
    assert [r.input_tokens for r in reqs] == [4808, 3180, 10]
    assert [r.arrival_s for r in reqs] == pytest.approx([0.0, 0.02004, 1.52004])


def test_readers_reject_malformed_files(tmp_path: Path) -> None:
    bad_cols = tmp_path / "a.csv"
    bad_cols.write_text("time,in,out\n1,2,3\n")
    with pytest.raises(TraceFormatError, match="columns"):
        read_azure_csv(bad_cols)
    bad_row = tmp_path / "b.csv"
    bad_row.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:04,many,8\n")
    with pytest.raises(TraceFormatError, match=r"b\.csv:2"):
        read_azure_csv(bad_row)
    bad_json = tmp_path / "c.jsonl"
    bad_json.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1}\n')
    with pytest.raises(TraceFormatError, match=r"c\.jsonl:2"):
        read_mooncake_jsonl(bad_json)
    with pytest.raises(TraceFormatError, match="unknown trace format"):
        load_trace(str(tmp_path / "x.parquet"))


def test_mooncake_reader_rebases_and_converts_ms(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    p.write_text(
        '{"timestamp": 2500, "input_length": 600, "output_length": 3, "hash_ids": [0, 9]}\n\n'
        '{"timestamp": 1000, "input_length": 100, "output_length": 4, "hash_ids": [0]}\n'
    )
    reqs = read_mooncake_jsonl(p)
    assert reqs == [TraceRequest(0.0, 100, 4, (0,)), TraceRequest(1.5, 600, 3, (0, 9))]
    assert block_reuse_fraction(reqs) == pytest.approx(1 / 3)


def test_poisson_arrivals_have_the_requested_rate_and_unit_cv() -> None:
    reqs = synthetic(20.0, count=20_000, seed=7)
    gaps = [b.arrival_s - a.arrival_s for a, b in itertools.pairwise(reqs)]
    assert mean_rate(reqs) == pytest.approx(20.0, rel=0.03)
    assert statistics.stdev(gaps) / statistics.mean(gaps) == pytest.approx(1.0, rel=0.05)
    assert synthetic(20.0, count=50, seed=7) == reqs[:50]  # deterministic per seed


def test_gamma_arrivals_are_burstier_at_higher_cv() -> None:
    reqs = synthetic(5.0, duration_s=2000.0, cv=3.0, seed=1)
    gaps = [b.arrival_s - a.arrival_s for a, b in itertools.pairwise(reqs)]
    assert reqs[-1].arrival_s < 2000.0
    assert mean_rate(reqs) == pytest.approx(5.0, rel=0.15)
    assert statistics.stdev(gaps) / statistics.mean(gaps) == pytest.approx(3.0, rel=0.2)


def test_synthetic_resamples_lengths_from_a_trace() -> None:
    source = [TraceRequest(0.0, 100, 1), TraceRequest(1.0, 2000, 50, (4, 5, 6, 7))]
    reqs = synthetic(1.0, count=200, lengths_from=source, seed=3)
    pairs = {(r.input_tokens, r.output_tokens, r.hash_ids) for r in reqs}
    assert pairs == {(100, 1, ()), (2000, 50, (4, 5, 6, 7))}


def test_synthetic_requires_a_bound_and_sane_parameters() -> None:
    with pytest.raises(ValueError, match="count or a duration"):
        synthetic(1.0)
    with pytest.raises(ValueError, match="rate"):
        synthetic(0.0, count=1)
    with pytest.raises(ValueError, match="cv"):
        synthetic(1.0, count=1, cv=0.0)


def test_time_compression_and_rate_scaling() -> None:
    reqs = synthetic(2.0, count=1000, seed=2)
    fast = compress_time(reqs, 10.0)
    assert [r.arrival_s * 10 for r in fast] == pytest.approx([r.arrival_s for r in reqs])
    assert mean_rate(fast) == pytest.approx(10 * mean_rate(reqs))
    target = scale_to_rate(reqs, 7.5)
    assert mean_rate(target) == pytest.approx(7.5)
    assert [r.input_tokens for r in target] == [r.input_tokens for r in reqs]
    with pytest.raises(ValueError, match="positive"):
        compress_time(reqs, 0.0)
    with pytest.raises(ValueError, match="two requests"):
        scale_to_rate(reqs[:1], 1.0)


def test_window_rebases_and_clip_trims_blocks() -> None:
    reqs = [TraceRequest(float(t), 1500, 10, (1, 2, 3)) for t in range(10)]
    mid = window(reqs, 3.0, 4.0)
    assert [r.arrival_s for r in mid] == [0.0, 1.0, 2.0, 3.0]
    clipped = clip_lengths(reqs[:1], max_input=600, max_output=4)
    assert clipped == [TraceRequest(0.0, 600, 4, (1, 2))]


def test_mix_shift_moves_from_chat_to_documents_and_back() -> None:
    from semipd.traces import TraceRequest, mix_shift

    chat = [TraceRequest(0.0, 500, 200)]
    docs = [TraceRequest(0.0, 9000, 300)]
    a = mix_shift(chat, docs, 3600.0, 5.0, (0.05, 0.5), seed=3)
    assert a == mix_shift(chat, docs, 3600.0, 5.0, (0.05, 0.5), seed=3)
    assert all(0 <= r.arrival_s < 3600.0 for r in a)
    assert abs(len(a) / 3600.0 - 5.0) < 0.3

    def doc_share(t0: float, t1: float) -> float:
        part = [r for r in a if t0 <= r.arrival_s < t1]
        return sum(r.input_tokens == 9000 for r in part) / len(part)

    edges, middle = doc_share(0, 600), doc_share(1500, 2100)
    assert edges < 0.15
    assert 0.35 < middle < 0.65
    assert doc_share(3000, 3600) < 0.15
