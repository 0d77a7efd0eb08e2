"""publish_slo: the burn-rate rules' inputs, with no stale bucket series left behind."""

from __future__ import annotations

from prometheus_client import REGISTRY

from semipd.controller.metrics import publish_slo


def bucket_series(pool: str) -> set[tuple[str, str, str]]:
    out = set()
    for fam in REGISTRY.collect():
        if fam.name == "semipd_slo_bucket_info":
            out |= {(s.labels["slo"], s.labels["engine_metrics"], s.labels["bucket_le"])
                    for s in fam.samples if s.labels["pool"] == pool}  # fmt: skip
    return out


def test_a_changed_objective_replaces_its_bucket_series() -> None:
    publish_slo("ns", "p-slo", {"ttft": 2.0, "itl": 0.08}, 0.99, {("ttft", "sglang"): "2.0", ("itl", "sglang"): "0.08"})
    assert bucket_series("p-slo") == {("ttft", "sglang", "2.0"), ("itl", "sglang", "0.08")}
    publish_slo(
        "ns", "p-slo", {"ttft": 1.0, "itl": 0.08}, 0.995, {("ttft", "sglang"): "1.0", ("itl", "sglang"): "0.08"}
    )
    assert bucket_series("p-slo") == {("ttft", "sglang", "1.0"), ("itl", "sglang", "0.08")}
    assert (
        REGISTRY.get_sample_value("semipd_slo_attainment_target_ratio", {"namespace": "ns", "pool": "p-slo"}) == 0.995
    )
    assert (
        REGISTRY.get_sample_value("semipd_slo_target_seconds", {"namespace": "ns", "pool": "p-slo", "slo": "ttft"})
        == 1.0
    )
