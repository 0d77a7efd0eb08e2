"""Which engine histogram bucket each SLO objective falls on, per metric family."""

from __future__ import annotations

from semipd.engines.families import family_of, slo_buckets


def test_each_family_of_the_pool_gets_the_bucket_at_or_below_each_objective() -> None:
    got = slo_buckets(["sim", "sglang-semipd", "mindie"], {"ttft": 2.0, "itl": 0.08})
    assert got == {("ttft", "sglang"): "2.0", ("itl", "sglang"): "0.08",
                   ("ttft", "mindie"): "1.0", ("itl", "mindie"): "0.075"}  # fmt: skip


def test_an_objective_between_bounds_rounds_down_and_one_below_every_bound_is_left_out() -> None:
    sglang = family_of("sim").metrics
    below_smallest = min(sglang.itl_buckets) / 2
    got = slo_buckets(["sim"], {"ttft": 2.2, "itl": below_smallest})
    assert got == {("ttft", "sglang"): "2.0"}
