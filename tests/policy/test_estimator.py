"""The online fit: l100 leaves the prior only when the TTFT samples identify it."""

from __future__ import annotations

import random

import pytest

from semipd.perf import LatencyModel, contended_shares
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
