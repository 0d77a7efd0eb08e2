"""xPyD: whole-GPU prefill, KV transfer to a decode instance, uncontended decode."""

from __future__ import annotations

import pytest

from semipd.sim.fleet.baselines.disaggregated import ratios, static_disaggregated

from ..helpers import H200_8B, fleet, pool, reqs, run

M = H200_8B


def test_request_path_prefill_transfer_decode() -> None:
    setup, _ = static_disaggregated(fleet(pool(2)), 1, 1)
    sim = run(setup, reqs((0.0, 2000, 4)))
    r = sim.requests[0]
    ttft = M.prefill_time([2000], 1.0)
    transfer = 2000 * M.kv_bytes_per_token() / (setup.kv_link_gbs * 1e9)
    assert r.first_token == pytest.approx(ttft)
    steps = sum(M.decode_step_time(1, 2001 + k, 1.0) for k in range(3))
    assert r.finish == pytest.approx(ttft + transfer + steps, rel=1e-12)
    assert r.instance.name.startswith("decode-")


def test_decode_side_full_holds_the_prefill_kv() -> None:
    setup, _ = static_disaggregated(fleet(pool(2, kv_capacity=3000)), 1, 1)
    sim = run(setup, reqs((0.0, 2000, 500), (0.0, 2000, 3)))
    a, b = sim.requests
    # B's prefill may run only after A's 2000 prompt tokens left the prefill side (3000-token pool);
    # then B waits for decode room (A holds 2500 of 3000) until A finishes.
    assert b.dispatch >= a.first_token
    assert b.finish > a.finish
    assert all(r.done for r in sim.requests)


def test_ratio_grid_covers_the_budget() -> None:
    assert ratios(4) == [(1, 3), (2, 2), (3, 1)]
    with pytest.raises(ValueError, match="at least one"):
        static_disaggregated(fleet(pool(2)), 0, 2)


def test_single_token_requests_finish_on_the_prefill_side() -> None:
    setup, _ = static_disaggregated(fleet(pool(2)), 1, 1)
    sim = run(setup, reqs((0.0, 2000, 1), (0.5, 300, 1)))
    assert all(r.done and r.finish == r.first_token for r in sim.requests)
    assert all(r.instance.name.startswith("prefill-") for r in sim.requests)
    prefill = sim.pools()["prefill"].members()[0]
    assert prefill.kv.reserved == 0
