"""The contention model: sourced standalone curves, sourced overlap figures, the take-turns end,
and the calibration file the GPU harness writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from semipd.perf import (
    SHARE_CURVES,
    TAKE_TURNS,
    ContentionModel,
    LatencyModel,
    contended_shares,
    contention_from_json,
    load_contention,
    share_speed,
)

# Standalone decode speed at a share of the SMs, derived from SGLang's PD-Multiplexing predictor
# tables (reference contention.md): (share, speed), the source's own k.
DECODE_KNEES = {
    "sglang-a100": ([(0.30, 0.78), (0.44, 0.86), (0.59, 0.97)], 0.15),
    "sglang-h800": ([(0.24, 0.80), (0.48, 0.95)], 0.09),
}
KNEE_TOLERANCE = 0.07
"""Absolute speed: one k cannot follow the tables' sharp bandwidth knee more closely."""


@pytest.mark.parametrize("source", sorted(DECODE_KNEES))
def test_decode_share_curve_follows_each_sourced_profile(source: str) -> None:
    points, k = DECODE_KNEES[source]
    for share, speed in points:
        assert share_speed(share, k) == pytest.approx(speed, abs=KNEE_TOLERANCE), (source, share)
    # A proportional decode (k = 1) is far outside every profile: the knee matters.
    assert all(abs(share_speed(s, 1.0) - v) > 0.3 for s, v in points)


def test_semipd_fitted_tpot_curves_are_the_same_form() -> None:
    # Paper Fig. 10: TPOT = 0.6284/y + 0.3818; code scale_tpot = 0.6099*inv + 0.4153 (normalised at y = 1).
    for a, b in ((0.6284, 0.3818), (0.6099164272415375, 0.41530605763705736)):
        k = a / (a + b)
        for y in (0.2, 0.35, 0.5, 0.8, 1.0):
            fitted = (a / y + b) / (a + b)
            assert 1.0 / share_speed(y, k) == pytest.approx(fitted, rel=1e-9)


def test_legacy_decode_slowdown_is_semipd_code_curve() -> None:
    m = LatencyModel.from_names("a100", "llama-3-8b")
    a = m.hardware.decode_share_sensitivity
    for y in (0.2, 0.5, 0.8):
        assert m.bandwidth_slowdown(y) == pytest.approx(1.0 / share_speed(y, a), rel=1e-12)


def test_nanoflow_gemv_reading() -> None:
    # NanoFlow: GEMV at a 0.4 share reaches about 0.8 of solo (secondary reading, unverified).
    assert SHARE_CURVES.decode_speed(0.4, None) == pytest.approx(0.8, abs=0.05)


@pytest.mark.parametrize(
    ("model", "lo", "hi"),
    [
        (SHARE_CURVES, 1.28, 1.36),  # POD-Attention average 1.33x
        (ContentionModel(0.4, 0.1, 0.0), 1.58, 1.70),  # POD-Attention max 1.61x
        (ContentionModel(1.0, 0.6, 0.4), 0.85, 0.99),  # co-running loses to taking turns
    ],
)
def test_combined_progress_spans_the_measured_overlap(model: ContentionModel, lo: float, hi: float) -> None:
    for x, y in ((0.5, 0.5), (0.6, 0.4), (0.7, 0.3)):
        assert lo <= model.combined_progress(x, y) <= hi


def test_defaults_lie_inside_every_sourced_range() -> None:
    c = SHARE_CURVES
    assert 0.34 <= c.prefill_k <= 0.81  # MuxServe 0.34-0.71, SGLang 0.40-0.81
    assert 0.02 <= c.decode_k <= 0.26  # batch <= 64
    assert 0.0 <= c.interference <= 0.5


def test_defaults_stay_below_semipd_fitted_curve_read_as_co_run() -> None:
    # Semi-PD's TPOT fit was taken while both workers served: it bounds the co-run decode slowdown
    # from above. Counting it as standalone and adding interference on top would exceed it.
    a, b = 0.6099164272415375, 0.41530605763705736
    for y in (0.2, 0.3, 0.5, 0.7, 0.9):
        co_run_slowdown = 1.0 / SHARE_CURVES.decode_speed(y, 1.0 - y)
        assert co_run_slowdown <= (a / y + b) / (a + b)
        assert co_run_slowdown > 1.0 / share_speed(y, SHARE_CURVES.decode_k)  # interference counted once


def test_overlapping_caps_are_normalised_like_semipd() -> None:
    c = ContentionModel(1.0, 1.0, 0.0)
    p, d = c.speeds(1.0, 1.0)
    assert (p, d) == pytest.approx(contended_shares(1.0, 1.0))


def test_take_turns_reproduces_the_legacy_latency_model_exactly() -> None:
    m = LatencyModel.from_names("h100", "llama-3-8b")
    assert m.contention is TAKE_TURNS
    lens = [900, 3000]
    for x, y in ((0.8, 1.0), (0.5, 0.5), (0.3, 0.6), (1.0, 1.0)):
        px, py = contended_shares(x, y)
        assert m.prefill_batch_time(lens, x, y) == m.prefill_time(lens, px)
        assert m.prefill_batch_time(lens, x, None) == m.prefill_time(lens, x)
        assert m.decode_batch_time(32, 32 * 1500, y, x) == m.decode_step_time(32, 32 * 1500, py, prefill_running=True)
        assert m.decode_batch_time(32, 32 * 1500, y, None) == m.decode_step_time(32, 32 * 1500, y)


def test_share_curves_scale_the_whole_device_time() -> None:
    m = LatencyModel.from_names("h100", "llama-3-8b", contention=SHARE_CURVES)
    full_p = m.prefill_time([2000], 1.0)
    full_d = m.decode_step_time(32, 32 * 1500, 1.0)
    # Shares are rounded down to whole TPCs (0.6 of 66 TPCs is 39).
    assert m.prefill_batch_time([2000], 0.6, None) == pytest.approx(full_p / share_speed(39 / 66, 0.6))
    p, d = SHARE_CURVES.speeds(39 / 66, m.effective_share(0.4))
    assert m.prefill_batch_time([2000], 0.6, 0.4) == pytest.approx(full_p / p)
    assert m.decode_batch_time(32, 32 * 1500, 0.4, 0.6) == pytest.approx(full_d / d)
    # No double counting: neither Semi-PD's fitted slowdown nor the colocation beta applies.
    legacy = m.with_changes(contention=TAKE_TURNS)
    assert m.decode_batch_time(32, 32 * 1500, 0.4, 0.6) < legacy.decode_batch_time(32, 32 * 1500, 0.4, 0.6)


def test_decode_alone_follows_decode_share_curve_and_beats_co_running() -> None:
    # Decode alone once ran on prefill's curve (k_p 0.6): at cap 0.3 it was slower than co-running
    # with a prefill at the smaller normalised share 0.27, which no device does.
    m = LatencyModel.from_names("h200", "llama-3-8b", contention=SHARE_CURVES)
    full_d = m.decode_step_time(32, 32 * 1500, 1.0)
    for y in (0.2, 0.3, 0.4, 0.5, 0.7, 1.0):
        alone = m.decode_batch_time(32, 32 * 1500, y, None)
        assert alone == pytest.approx(full_d / share_speed(m.effective_share(y), SHARE_CURVES.decode_k))
        for x in (0.5, 0.8, 1.0):
            assert alone < m.decode_batch_time(32, 32 * 1500, y, x)
    assert m.prefill_batch_time([2000], 0.3, None) == pytest.approx(
        m.prefill_time([2000], 1.0) / share_speed(m.effective_share(0.3), SHARE_CURVES.prefill_k)
    )


def test_ideal_end_has_no_contention() -> None:
    m = LatencyModel.from_names("h100", "llama-3-8b", contention=ContentionModel(0.0, 0.0, 0.0))
    assert m.prefill_batch_time([2000], 0.5, 0.5) == pytest.approx(m.prefill_time([2000], 1.0))
    assert m.decode_batch_time(8, 8000, 0.5, 0.5) == pytest.approx(m.decode_step_time(8, 8000, 1.0))


def _doc(**over: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "schema": "semipd.io/contention/v1",
        "hardware": "h200",
        "device": "NVIDIA H200",
        "partitioning": "green-context",
        "prefill_k": 0.5,
        "decode_k": 0.15,
        "interference": 0.12,
        "per_model": {"llama-3-8b": {"prefill_k": 0.9}},
    }
    doc.update(over)
    return doc


def test_loads_the_calibration_file(tmp_path: Path) -> None:
    path = tmp_path / "h200.json"
    path.write_text(json.dumps(_doc()))
    assert load_contention(path) == ContentionModel(0.5, 0.15, 0.12)


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"schema": "other/v1"}, "schema"),
        ({"interference": 1.5}, "interference must be a number in"),
        ({"decode_k": -0.1}, "decode_k must be a number in"),
        ({"prefill_k": "0.5"}, "prefill_k must be a number"),
        ({"prefill_k": True}, "prefill_k must be a number"),
        ({"partitioning": "mig"}, "partitioning"),
        ({"partitioning": "streams", "prefill_k": None}, "prefill_k was not fitted"),
    ],
)
def test_bad_calibration_files_get_a_clear_error(over: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        contention_from_json(_doc(**over))


def test_missing_and_unreadable_files_name_the_problem(tmp_path: Path) -> None:
    doc = _doc()
    del doc["decode_k"]
    with pytest.raises(ValueError, match="missing 'decode_k'"):
        contention_from_json(doc)
    with pytest.raises(ValueError, match="cannot read"):
        load_contention(tmp_path / "absent.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError, match="not JSON"):
        load_contention(tmp_path / "bad.json")


def test_cli_form_parses() -> None:
    assert ContentionModel.parse("take-turns") is TAKE_TURNS
    assert ContentionModel.parse("0.6,0.2,0.3") == ContentionModel(0.6, 0.2, 0.3)
    with pytest.raises(ValueError, match="three numbers"):
        ContentionModel.parse("0.6,0.2")
