"""The online fit: l100 leaves the prior only when the TTFT samples identify it."""

from __future__ import annotations

import random

import pytest

from semipd.perf import LatencyModel, contended_shares
from semipd.perf.contention import SHARE_CURVES
from semipd.policy.estimator import BURST_UTILIZATION, Estimator, Fit, Sample, refit

MODEL = LatencyModel.from_names("h200", "qwen3-32b")


def _samples(l100_scale: float, rates: list[float], noise: float, seed: int = 0) -> tuple[Sample, ...]:
    """TTFT samples of a world whose l100 is `l100_scale` x the prior (a1 fixed), with relative noise."""
    rng = random.Random(seed)
    fit = Fit(l100_scale=l100_scale, a1=0.3)
    est = Estimator(MODEL, fit)
    out = []
    for r in rates:
        ttft = est.ttft(100, 50, r) * (1.0 + rng.uniform(-noise, noise))
        out.append(Sample(prefill_share=2 / 3, decode_share=1 / 3, rate=r, ttft=ttft, itl=None, batch=None,
                          split=(100, 50)))  # fmt: skip
    return tuple(out)


def test_far_from_saturation_the_prior_l100_stays() -> None:
    # Light load: the queueing pole is far away, so noise alone would pick any scale on the grid.
    light = Estimator(MODEL, Fit()).l100()
    rates = [0.05 / light * k for k in (1, 2, 3, 4, 5, 6)]
    for seed in range(5):
        fitted = refit(MODEL, Fit(samples=_samples(1.0, rates, noise=0.2, seed=seed)))
        assert fitted.l100_scale == 1.0


@pytest.mark.parametrize("truth", [0.5, 2.0])
def test_samples_near_saturation_move_l100_off_the_prior(truth: float) -> None:
    # Loads up to 90 % of the true capacity: the TTFT's pole is measured, so the fit follows it.
    l100 = Estimator(MODEL, Fit(l100_scale=truth)).l100()
    rates = [(2 / 3) / l100 * u for u in (0.2, 0.4, 0.6, 0.75, 0.85, 0.9)]
    fitted = refit(MODEL, Fit(samples=_samples(truth, rates, noise=0.02)))
    assert fitted.l100_scale == pytest.approx(truth, rel=0.2)


def test_a_loose_ttft_slo_caps_capacity_below_saturation_and_a_tight_one_binds_first() -> None:
    est = Estimator(MODEL, Fit(a1=0.3))
    share = contended_shares(1.0, 0.5)[0]
    saturation = share / est.l100()
    # A 30 s TTFT SLO would let the pod run at ~98 % of saturation: a burst would then saturate it.
    loose = est.capacity([(100, 50)], 30.0, 10.0, 0.1)
    assert loose == pytest.approx(BURST_UTILIZATION * saturation)
    # A tight TTFT SLO is the limit, below the cap, and unchanged by it.
    tight = est.capacity([(100, 50)], 0.6, 10.0, 0.1)
    assert tight == pytest.approx((share - 0.3 / 0.54) / est.l100())
    assert tight < BURST_UTILIZATION * saturation


SHARE_MODEL = MODEL.with_changes(contention=SHARE_CURVES)
CONTEXT = Fit().prompt_tokens + Fit().output_tokens / 2.0


def test_under_take_turns_the_prior_is_the_contended_share_and_the_legacy_step() -> None:
    est = Estimator(MODEL, Fit())
    assert est.prefill_speed(100, 50) == contended_shares(1.0, 0.5)[0]
    b = 24
    legacy = MODEL.decode_step_time(b, int(b * CONTEXT), contended_shares(1.0, 0.5)[1], prefill_running=True)
    assert est.itl(100, 50, rate=5.0, batch=b) == legacy


@pytest.mark.parametrize("split", [(100, 50), (100, 40), (80, 30), (60, 60)])
def test_under_share_curves_the_prior_runs_at_the_models_co_run_speeds(split: tuple[int, int]) -> None:
    x, y = split
    est = Estimator(SHARE_MODEL, Fit())
    prompt = [round(Fit().prompt_tokens)]
    speed = SHARE_MODEL.prefill_time(prompt, 1.0) / SHARE_MODEL.prefill_batch_time(prompt, x / 100, y / 100)
    assert est.prefill_speed(x, y) == pytest.approx(speed)
    assert est.saturation_rate(x, y) == pytest.approx(speed / est.l100())
    b = 24
    busy_rate = 0.5 * speed / est.l100()  # prefill runs half the time: the token p99 is the co-run step
    corun = SHARE_MODEL.decode_batch_time(b, int(b * CONTEXT), y / 100, x / 100)
    assert est.itl(x, y, busy_rate, batch=b) == pytest.approx(corun)
    idle_rate = 0.001 * speed / est.l100()  # under 1 % of tokens see a prefill: decode's own cap
    alone = SHARE_MODEL.decode_batch_time(b, int(b * CONTEXT), y / 100, None)
    assert est.itl(x, y, idle_rate, batch=b) == pytest.approx(alone)
    assert alone < corun


def test_share_curves_slow_decode_less_per_share_than_take_turns() -> None:
    # The legacy prior counts Semi-PD's co-run slowdown as standalone and adds beta on top (a double
    # count): from decode 50 % to 40 % at prefill 100 % its step grows more than the share curves'.
    def growth(model: LatencyModel) -> float:
        est = Estimator(model, Fit())
        return est.itl(100, 40, 2.0, batch=24) / est.itl(100, 50, 2.0, batch=24)

    assert 1.0 < growth(SHARE_MODEL) < growth(MODEL)


def test_the_l100_fit_uses_the_priors_prefill_speed_under_share_curves() -> None:
    truth = 2.0
    world = Estimator(SHARE_MODEL, Fit(l100_scale=truth, a1=0.3))
    rates = [world.saturation_rate(100, 50) * u for u in (0.2, 0.4, 0.6, 0.75, 0.85, 0.9)]
    x, y = contended_shares(1.0, 0.5)
    samples = tuple(Sample(x, y, r, world.ttft(100, 50, r), None, None, split=(100, 50)) for r in rates)
    fitted = refit(SHARE_MODEL, Fit(samples=samples))
    assert fitted.l100_scale == pytest.approx(truth, rel=0.05)
    assert fitted.a1 == pytest.approx(0.3, rel=0.05)
