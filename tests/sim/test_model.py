"""Anchor tests: the latency model against the published numbers in the latency-model reference.

Each tolerance is stated next to its anchor and repeated in docs/latency-model.md.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semipd.perf import HARDWARE, MODELS, LatencyModel, ModelFitError


def rel_err(got: float, want: float) -> float:
    return abs(got - want) / want


# --- tables ---------------------------------------------------------------------------------------


def test_required_profiles_exist() -> None:
    for key in ("h100", "h200", "a100", "ascend-910b2", "ascend-910b3", "ascend-910b4", "ascend-910c"):
        assert HARDWARE[key].name == key
    for key in ("llama-3-8b", "llama-3-70b", "qwen3-30b-a3b", "deepseek-v3"):
        assert MODELS[key].name == key
    assert MODELS["llama-3-8b"].experts == 0
    assert MODELS["deepseek-v3"].experts == 256
    assert MODELS["deepseek-v3"].experts_per_token == 8


@pytest.mark.parametrize(
    ("model", "kv_bytes"),
    [
        ("llama-3-8b", 131_072),
        ("llama-3-70b", 327_680),
        ("qwen3-32b", 262_144),
        ("qwen3-235b-a22b", 192_512),
        ("deepseek-v3", 70_272),
    ],
)
def test_kv_bytes_per_token_match_reference_table(model: str, kv_bytes: int) -> None:
    assert MODELS[model].kv_bytes_per_token == kv_bytes


@pytest.mark.parametrize("name", ["llama-3-8b", "llama-3-70b", "qwen3-32b"])
def test_dense_shapes_reproduce_published_parameter_count(name: str) -> None:
    m = MODELS[name]
    kv_dim = m.kv_heads * m.head_dim
    attn = m.hidden * m.q_heads * m.head_dim * 2 + m.hidden * kv_dim * 2
    mlp = 3 * m.hidden * m.ffn
    total = 2 * m.vocab * m.hidden + m.layers * (attn + mlp)
    assert rel_err(total, m.params) < 0.03


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3"])
def test_moe_expert_sizes_reproduce_published_active_parameters(name: str) -> None:
    m = MODELS[name]
    routed = m.moe_layers * m.experts * m.expert_params
    active = m.params - routed + m.moe_layers * m.experts_per_token * m.expert_params
    assert rel_err(active, m.active_params) < 0.03


# --- KV capacity (reference section 2, 90 % memory) ----------------------------------------------


@pytest.mark.parametrize(
    ("hw", "model", "tp", "tokens"),
    [("h100", "llama-3-8b", 1, 427_000), ("h200", "llama-3-8b", 1, 846_000), ("h100", "llama-3-70b", 4, 448_000)],
)
def test_kv_capacity_matches_reference_examples(hw: str, model: str, tp: int, tokens: int) -> None:
    assert rel_err(LatencyModel.from_names(hw, model, tp).kv_capacity_tokens(), tokens) < 0.01


def test_mla_kv_is_replicated_and_gqa_kv_is_split_across_tp() -> None:
    assert LatencyModel.from_names("h200", "deepseek-v3", 8).kv_bytes_per_token() == 70_272
    assert LatencyModel.from_names("h100", "llama-3-70b", 4).kv_bytes_per_token() == 81_920  # 80 KiB
    # 8 KV heads over TP16: one head per rank, not half a head.
    assert LatencyModel.from_names("h100", "llama-3-70b", 16).kv_bytes_per_token() == 327_680 / 8


def test_model_that_does_not_fit_is_refused() -> None:
    with pytest.raises(ModelFitError, match="deepseek-v3"):
        LatencyModel.from_names("h100", "deepseek-v3", 1)
    with pytest.raises(ModelFitError):
        LatencyModel.from_names("h100", "deepseek-v3", 8)  # 671 GB FP8 > 8 x 72 GB


def test_unknown_names_list_the_known_ones() -> None:
    with pytest.raises(KeyError, match="h100"):
        LatencyModel.from_names("b200", "llama-3-8b")
    with pytest.raises(KeyError, match="llama-3-8b"):
        LatencyModel.from_names("h100", "gpt-5")


# --- DistServe A100-80G fits (reference section 5) -----------------------------------------------


def distserve_prefill_ms(coef: tuple[float, float, float], lens: list[int]) -> float:
    a, b, c = coef
    return a + b * sum(lens) + c * sum(x * x for x in lens)


OPT13B_PREFILL = {1: (18.10, 0.1019, 7.12e-6), 2: (14.74, 0.0686, 2.45e-6), 4: (12.06, 0.0381, 5.2e-7)}


@pytest.mark.parametrize("lens", [[256], [512], [1024], [2048], [512, 512], [128, 256, 1024]])
def test_prefill_reproduces_distserve_opt13b_tp1_within_2_percent(lens: list[int]) -> None:
    model = LatencyModel.from_names("a100", "opt-13b")
    want = distserve_prefill_ms(OPT13B_PREFILL[1], lens) / 1e3
    assert rel_err(model.prefill_time(lens, 1.0), want) < 0.02


@pytest.mark.parametrize("tp", [2, 4])
@pytest.mark.parametrize("n", [256, 512, 1024, 2048])
def test_prefill_reproduces_distserve_opt13b_tensor_parallel_within_10_percent(tp: int, n: int) -> None:
    model = LatencyModel.from_names("a100", "opt-13b", tp)
    want = distserve_prefill_ms(OPT13B_PREFILL[tp], [n]) / 1e3
    assert rel_err(model.prefill_time([n], 1.0), want) < 0.10


def test_short_prefill_is_bounded_below_by_reading_the_weights() -> None:
    # Below ~200 tokens the model deliberately departs from DistServe's linear fit: a prefill cannot
    # beat one pass over the weights at the measured decode bandwidth.
    model = LatencyModel.from_names("a100", "opt-13b")
    hw = model.hardware
    weight_read = model.weights_bytes() / (hw.hbm_bandwidth_tbs * 1e12 * hw.bandwidth_efficiency)
    assert model.prefill_time([16], 1.0) > weight_read


@pytest.mark.parametrize(("batch", "ctx"), [(1, 128), (8, 512), (32, 1024), (64, 512), (90, 1024)])
def test_decode_reproduces_distserve_opt13b_within_2_percent(batch: int, ctx: int) -> None:
    model = LatencyModel.from_names("a100", "opt-13b")
    want = (19.93 + 6.27e-4 * batch * ctx + 0.0385 * batch) / 1e3
    assert rel_err(model.decode_step_time(batch, batch * ctx, 1.0), want) < 0.02


# --- Semi-PD latency vs share (reference section 4) ----------------------------------------------


def semipd_scale_latency(p: float) -> float:
    return 0.732435017003385 * 100 / p + 0.3185253290850649


def semipd_scale_tpot(p: float) -> float:
    return 0.6099164272415375 * 100 / p + 0.41530605763705736


SHARES = [90, 80, 60, 50, 30, 20]


@pytest.mark.parametrize("p", SHARES)
def test_prefill_share_curve_matches_semipd_code_fit_within_5_percent(p: int) -> None:
    # A ShareGPT-sized prompt (~350 tokens) on the A100 profile (the paper's Llama hardware).
    model = LatencyModel.from_names("a100", "llama-3-8b")
    ratio = model.prefill_time([350], p / 100) / model.prefill_time([350], 1.0)
    assert rel_err(ratio, semipd_scale_latency(p) / semipd_scale_latency(100)) < 0.05


@pytest.mark.parametrize("p", SHARES)
def test_decode_share_curve_matches_semipd_code_fit_within_6_percent(p: int) -> None:
    model = LatencyModel.from_names("a100", "llama-3-8b")
    ratio = model.decode_step_time(32, 32 * 512, p / 100) / model.decode_step_time(32, 32 * 512, 1.0)
    assert rel_err(ratio, semipd_scale_tpot(p) / semipd_scale_tpot(100)) < 0.06


@pytest.mark.parametrize("y", [0.8, 0.5, 0.2])
def test_decode_share_curve_matches_semipd_paper_fit_within_8_percent(y: float) -> None:
    def paper(v: float) -> float:
        return 0.6284 / v + 0.3818

    model = LatencyModel.from_names("a100", "llama-3-8b")
    ratio = model.decode_step_time(32, 32 * 512, y) / model.decode_step_time(32, 32 * 512, 1.0)
    assert rel_err(ratio, paper(y) / paper(1.0)) < 0.08


def test_shares_round_down_to_whole_tpcs() -> None:
    model = LatencyModel.from_names("a100", "llama-3-8b")  # 54 TPCs
    assert model.effective_share(0.9) == pytest.approx(48 / 54)
    assert model.effective_share(0.001) == pytest.approx(1 / 54)
    assert model.effective_share(1.0) == 1.0
    for bad in (0.0, -0.1, 1.01):
        with pytest.raises(ValueError, match="share"):
            model.effective_share(bad)


# --- roofline expectations (reference section 3, H100) -------------------------------------------


@pytest.mark.parametrize(
    ("model_name", "tp", "batch", "ctx", "lower_ms", "low_ms", "high_ms"),
    [
        ("llama-3-8b", 1, 1, 128, 4.8, 6.0, 7.0),
        ("llama-3-8b", 1, 64, 2048, 9.9, 10.0, 14.0),
        ("llama-3-70b", 4, 1, 128, 10.5, 13.0, 16.0),
        ("llama-3-70b", 8, 1, 128, 5.3, 8.0, 10.0),
    ],
)
def test_h100_decode_sits_in_reference_expected_range(
    model_name: str, tp: int, batch: int, ctx: int, lower_ms: float, low_ms: float, high_ms: float
) -> None:
    ms = LatencyModel.from_names("h100", model_name, tp).decode_step_time(batch, batch * ctx, 1.0) * 1e3
    assert ms > lower_ms
    assert low_ms <= ms <= high_ms


def test_h100_prefill_of_1k_tokens_near_reference_example() -> None:
    # "≈28 ms per 1k tokens at MFU 0.6, ≈55-60 ms for 2k tokens plus attention" (+ 5 ms overhead).
    model = LatencyModel.from_names("h100", "llama-3-8b")
    assert 0.028 <= model.prefill_time([1024], 1.0) <= 0.038
    assert 0.055 <= model.prefill_time([2048], 1.0) <= 0.070


# --- system anchors (reference section 7) --------------------------------------------------------


def test_anchor2_semipd_single_request_tpot_within_40_percent() -> None:
    # Known conflict: DistServe's A100 fit (followed here) gives ~12.5 ms for Llama-3-8B; the latency
    # implied by Semi-PD's SLO scale is 17-20 ms. Reported in docs/latency-model.md.
    small = LatencyModel.from_names("a100", "llama-3-8b").decode_step_time(1, 350, 1.0)
    large = LatencyModel.from_names("a100", "llama-3-70b", 4).decode_step_time(1, 350, 1.0)
    assert rel_err(small, 0.0185) < 0.40
    assert rel_err(large, 0.040) < 0.40
    assert small < large


@pytest.mark.parametrize(("prompt", "want_ratio"), [(350, 113 / 40), (2870, 800 / 300)])
def test_anchor2_ttft_ratio_70b_tp4_over_8b_within_25_percent(prompt: int, want_ratio: float) -> None:
    small = LatencyModel.from_names("a100", "llama-3-8b").prefill_time([prompt], 1.0)
    large = LatencyModel.from_names("a100", "llama-3-70b", 4).prefill_time([prompt], 1.0)
    assert rel_err(large / small, want_ratio) < 0.25


def test_anchor11_prefill_token_velocity_qwen3_32b_h100_tp2_within_15_percent() -> None:
    model = LatencyModel.from_names("h100", "qwen3-32b", 2)
    velocity = 4000 / model.prefill_time([4000], 1.0)
    assert rel_err(velocity, 15_928) < 0.15


def test_anchor6_deepseek_v3_h200_decode_step_below_measured_p99_tpot() -> None:
    # Semi-PD measured P99 TPOT 70-170 ms at 6-14 req/s; an uncontended step must be below that.
    model = LatencyModel.from_names("h200", "deepseek-v3", 8)
    for batch in (16, 64, 128):
        assert model.decode_step_time(batch, batch * 1500, 1.0) < 0.070


# --- MoE ------------------------------------------------------------------------------------------


def test_moe_decode_reads_only_touched_experts() -> None:
    model = LatencyModel.from_names("h100", "qwen3-30b-a3b")
    assert model.expected_experts_touched(1) == pytest.approx(8.0)
    assert model.expected_experts_touched(1000) == pytest.approx(128.0, rel=1e-3)
    one = model.decode_step_time(1, 100, 1.0)
    many = model.decode_step_time(256, 256 * 100, 1.0)
    hw = model.hardware
    all_weights = model.weights_bytes() / (hw.hbm_bandwidth_tbs * 1e12 * hw.bandwidth_efficiency)
    assert one < 0.25 * all_weights  # 8 of 128 experts per layer plus attention
    assert many > all_weights


def test_moe_prefill_uses_active_parameters() -> None:
    moe = LatencyModel.from_names("h100", "qwen3-30b-a3b").prefill_time([8192], 1.0)
    dense = LatencyModel.from_names("h100", "qwen3-32b").prefill_time([8192], 1.0)
    assert moe < dense / 4


# --- shape properties -----------------------------------------------------------------------------

ANY_MODEL = st.sampled_from(
    [
        ("a100", "llama-3-8b", 1),
        ("h100", "llama-3-70b", 4),
        ("ascend-910b3", "qwen3-30b-a3b", 2),
        ("h200", "deepseek-v3", 8),
        ("a100", "opt-13b", 2),
    ]
)


@settings(max_examples=200, deadline=None)
@given(ANY_MODEL, st.lists(st.integers(1, 8192), min_size=1, max_size=8), st.floats(0.05, 1.0))
def test_prefill_is_monotone_in_share_and_tokens(combo: tuple[str, str, int], lens: list[int], share: float) -> None:
    model = LatencyModel.from_names(*combo)
    t = model.prefill_time(lens, share)
    assert t > 0
    assert math.isfinite(t)
    assert model.prefill_time(lens, 1.0) <= t
    assert model.prefill_time([*lens, 64], share) > t


@settings(max_examples=200, deadline=None)
@given(ANY_MODEL, st.integers(1, 512), st.integers(0, 4096), st.floats(0.05, 1.0))
def test_decode_is_monotone_in_batch_context_and_share(
    combo: tuple[str, str, int], batch: int, ctx: int, share: float
) -> None:
    model = LatencyModel.from_names(*combo)
    t = model.decode_step_time(batch, batch * ctx, share)
    assert t > 0
    assert math.isfinite(t)
    assert model.decode_step_time(batch, batch * ctx, 1.0) <= t
    assert model.decode_step_time(batch + 1, (batch + 1) * ctx, share) > t
    assert model.decode_step_time(batch, batch * ctx + 1000, share) > t
    assert model.decode_step_time(batch, batch * ctx, share, prefill_running=True) >= t


def test_concurrent_prefill_slows_memory_bound_decode_by_beta() -> None:
    model = LatencyModel.from_names("h100", "llama-3-8b")
    alone = model.decode_step_time(8, 8 * 1024, 1.0)
    contended = model.decode_step_time(8, 8 * 1024, 1.0, prefill_running=True)
    assert contended / alone == pytest.approx(1 + model.hardware.colocation_beta, rel=0.05)


def test_empty_batches_take_no_time() -> None:
    model = LatencyModel.from_names("h100", "llama-3-8b")
    assert model.prefill_time([], 0.5) == 0.0
    assert model.decode_step_time(0, 0, 0.5) == 0.0


def test_prefix_cache_hits_make_prefill_cheaper_than_full_recompute() -> None:
    model = LatencyModel.from_names("h100", "llama-3-8b")
    full = model.prefill_time([4096], 1.0)
    cached = model.prefill_time([512], 1.0, prefix_lens=[3584])
    assert cached < full / 3
    assert cached > model.prefill_time([512], 1.0)  # attends over the cached prefix


def test_switch_is_seconds_and_far_cheaper_than_a_restart() -> None:
    for hw in ("a100", "h100", "ascend-910b3"):
        model = LatencyModel.from_names(hw, "llama-3-8b")
        assert 1.0 <= model.switch_cost() <= 10.0
        assert model.restart_cost() > 2 * model.switch_cost()
    big = LatencyModel.from_names("h200", "deepseek-v3", 8)
    assert big.restart_cost() > LatencyModel.from_names("h200", "llama-3-8b").restart_cost()


def test_chunked_prefill_size_follows_sglang_default() -> None:
    assert LatencyModel.from_names("h100", "llama-3-8b").max_batch_tokens == 8192
