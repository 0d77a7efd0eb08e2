"""`PUT`/`GET /v1/experts` of a real agent over a real simulated MoE engine, and the stdlib envelope parser."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from semipd.agent import experts as agent_experts
from semipd.agent.experts import PlacementRequestError, parse_placement_request
from semipd.perf.moe import layer_hit_probabilities
from semipd.policy.experts import formats
from semipd.policy.experts.formats import ExpertPlacementDoc, FormatError
from semipd.policy.experts.improved import rebalance_experts_improved
from semipd.sim.engine.localpod import LocalPod, PodOptions, PodSet

LAYERS, EXPERTS, K, TP, REDUNDANT = 48, 128, 8, 4, 32
SLOTS = EXPERTS + REDUNDANT
SKEW, SEED = 1.4, 3
MOE = PodOptions(
    model="qwen3-30b-a3b",
    hardware="h200",
    speedup=1.0,
    engine_args=[
        "--tp", str(TP), "--ep-num-redundant-experts", str(REDUNDANT),
        "--expert-skew", str(SKEW), "--expert-seed", str(SEED),
    ],
)  # fmt: skip


def envelope(version: int, table: np.ndarray, devices: int = TP, experts: int = EXPERTS) -> str:
    return ExpertPlacementDoc(version, table, experts, devices, "improved", pool="ns/p/np").to_json()


def improved() -> np.ndarray:
    hits = np.asarray(layer_hit_probabilities(LAYERS, EXPERTS, K, SKEW, SEED))
    return rebalance_experts_improved(hits, SLOTS, 1, 1, TP).phy2log


def trivial() -> np.ndarray:
    return np.tile(np.arange(SLOTS) % EXPERTS, (LAYERS, 1))


def engine_gauges(pod: LocalPod) -> dict[str, float]:
    families = text_string_to_metric_families(pod.engine_metrics_text())
    return {f.name: f.samples[0].value for f in families if f.name.startswith("semipd_sim_expert_") and f.samples}


def agent_metric(pod: LocalPod, name: str) -> float:
    for family in text_string_to_metric_families(pod.metrics_text()):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    raise AssertionError(f"{name} missing")


@pytest.fixture(scope="module")
def moe_pod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalPod]:
    with PodSet(tmp_path_factory.mktemp("experts")) as pods:
        yield pods.make(MOE)


# --- the envelope parser (stdlib) agrees with formats.ExpertPlacementDoc ----------------------------------


def test_the_agent_and_the_operator_share_the_format_constants() -> None:
    assert agent_experts.FORMAT == formats.FORMAT
    assert agent_experts.FORMAT_VERSION == formats.FORMAT_VERSION


def test_a_valid_envelope_parses_to_the_engine_body() -> None:
    table = improved()
    req = parse_placement_request(envelope(3, table).encode())
    assert (req.version, req.layers, req.logical_experts, req.physical_slots, req.devices) == (3, 48, 128, 160, 4)
    assert req.engine_body() == {"version": 3, "physical_to_logical_map": table.tolist()}


def _mutations() -> list[tuple[str, Callable[[dict[str, Any]], Any], str]]:
    def put(key: str, value: Any) -> Callable[[dict[str, Any]], Any]:
        return lambda d: d.__setitem__(key, value)

    def row(value: Any) -> Callable[[dict[str, Any]], Any]:
        return lambda d: d["physicalToLogicalMap"].__setitem__(0, value)

    return [
        ("format", put("format", "other"), "semipd.io/expert-placement document"),
        ("formatVersion", put("formatVersion", 2), "formatVersion 2"),
        ("layers", put("layers", 47), "must have 47 rows"),
        ("slots", put("physicalSlots", 161), "161 physical slots do not split over 4 devices"),
        ("short row", row([0] * (SLOTS - 1)), "row 0 must have 160 slots"),
        ("expert id", row([EXPERTS] * SLOTS), "is not an expert id"),
        ("bool id", row([True] * SLOTS), "is not an expert id"),
        ("missing", row([e % 100 for e in range(SLOTS)]), "have no physical slot"),
        ("experts", put("logicalExperts", 129), "have no physical slot"),
    ]


@pytest.mark.parametrize(("name", "mutate", "message"), _mutations(), ids=[m[0] for m in _mutations()])
def test_bad_envelopes_are_refused_by_both_parsers(
    name: str, mutate: Callable[[dict[str, Any]], Any], message: str
) -> None:
    doc = json.loads(envelope(1, trivial()))
    mutate(doc)
    text = json.dumps(doc)
    with pytest.raises(PlacementRequestError, match=message):
        parse_placement_request(text.encode())
    if name not in ("missing", "experts"):  # coverage of every expert is the engine's rule, not the format's
        with pytest.raises((FormatError, KeyError, ValueError)):
            ExpertPlacementDoc.from_json(text)


def test_non_json_and_non_positive_versions_are_refused() -> None:
    with pytest.raises(PlacementRequestError, match="not valid JSON"):
        parse_placement_request(b"{")
    doc = json.loads(envelope(1, trivial()))
    for bad in (0, -1, "1", True, None):
        doc["version"] = bad
        with pytest.raises(PlacementRequestError, match="version must be an integer >= 1"):
            parse_placement_request(json.dumps(doc).encode())


# --- a real agent over a real engine ----------------------------------------------------------------


def test_get_reports_the_trivial_map_before_any_rebalance(moe_pod: LocalPod) -> None:
    status, doc = moe_pod.admin("GET", "/v1/experts")
    assert status == 200
    assert doc["supported"] is True
    assert doc["version"] == 0
    assert (doc["layers"], doc["logicalExperts"], doc["physicalSlots"], doc["devices"]) == (48, 128, 160, 4)
    assert doc["maxOverMean"] > 1.3


def test_experts_endpoint_needs_the_token(moe_pod: LocalPod) -> None:
    assert moe_pod.admin("GET", "/v1/experts", auth=False)[0] == 401
    status, _ = moe_pod.admin("PUT", "/v1/experts", raw=envelope(9, improved()).encode(), auth="wrong")
    assert status == 401
    assert moe_pod.admin("GET", "/v1/experts")[1]["version"] != 9


def test_bad_bodies_are_400_with_a_message_and_change_nothing(moe_pod: LocalPod) -> None:
    before = moe_pod.admin("GET", "/v1/experts")[1]["version"]
    status, doc = moe_pod.admin("PUT", "/v1/experts", raw=b'{"format": "nope"}')
    assert status == 400
    assert doc["reason"] == "BadRequest"
    assert "semipd.io/expert-placement" in doc["error"]
    # A well-formed envelope of another shape: the engine refuses it (its layers and slots differ).
    small = np.tile(np.arange(8) % 8, (2, 1))
    status, doc = moe_pod.admin("PUT", "/v1/experts", raw=envelope(before + 1, small, devices=4, experts=8).encode())
    assert status == 400
    assert doc["reason"] == "RejectedByEngine"
    assert "48 MoE layers x 160 slots" in doc["error"]
    assert moe_pod.admin("GET", "/v1/experts")[1]["version"] == before
    assert agent_metric(moe_pod, "semipd_agent_failed_expert_rebalances_total") >= 1


def test_a_new_map_is_in_force_after_put_and_balancedness_rises(moe_pod: LocalPod) -> None:
    current = moe_pod.admin("GET", "/v1/experts")[1]["version"]
    before = engine_gauges(moe_pod)
    table = improved()
    status, doc = moe_pod.admin("PUT", "/v1/experts", raw=envelope(current + 1, table).encode())
    assert status == 200, doc
    assert doc["changed"] is True
    assert doc["version"] == current + 1
    after = engine_gauges(moe_pod)
    assert after["semipd_sim_expert_placement_version"] == current + 1
    assert after["semipd_sim_expert_balance_ratio"] > before["semipd_sim_expert_balance_ratio"] + 0.2
    assert after["semipd_sim_expert_max_over_mean"] < 1.3 < before["semipd_sim_expert_max_over_mean"]
    assert agent_metric(moe_pod, "semipd_agent_expert_placement_version") == current + 1
    assert agent_metric(moe_pod, "semipd_agent_expert_rebalances_total") >= 1
    # The same version again is a no-op; an older one or the same version with another map conflicts.
    status, doc = moe_pod.admin("PUT", "/v1/experts", raw=envelope(current + 1, table).encode())
    assert (status, doc["changed"]) == (200, False)
    status, doc = moe_pod.admin("PUT", "/v1/experts", raw=envelope(current + 1, trivial()).encode())
    assert (status, doc["reason"]) == (409, "Conflict")
    assert "different map" in doc["error"]


def test_a_second_put_while_one_runs_is_409(moe_pod: LocalPod) -> None:
    current = moe_pod.admin("GET", "/v1/experts")[1]["version"] + 1
    status, _ = moe_pod.admin("PUT", "/v1/experts", raw=envelope(current, improved()).encode())
    assert status == 200
    # Moving to the trivial map from the improved one copies most slots: ~1 s at speedup 1.
    first: dict[str, Any] = {}

    def rebalance() -> None:
        body = envelope(current + 1, trivial()).encode()
        first["status"], first["doc"] = moe_pod.admin("PUT", "/v1/experts", raw=body)

    thread = threading.Thread(target=rebalance)
    thread.start()
    try:
        seen = None
        for _ in range(200):
            status, doc = moe_pod.admin("PUT", "/v1/experts", raw=envelope(current + 2, improved()).encode())
            if status == 409:
                seen = doc
                break
            if status == 200:
                break
        assert seen is not None, "no concurrent PUT saw the rebalance running"
        assert seen["reason"] == "RebalanceInProgress"
    finally:
        thread.join(timeout=60)
    assert first["status"] == 200, first
    assert moe_pod.admin("GET", "/v1/experts")[1]["version"] == current + 1


def test_dense_engines_and_bad_topologies_report_unsupported(pod_factory: Callable[..., LocalPod]) -> None:
    dense = pod_factory(PodOptions(speedup=20.0))
    status, doc = dense.admin("GET", "/v1/experts")
    assert (status, doc["supported"]) == (200, False)
    assert "dense" in doc["unsupportedReason"]
    status, doc = dense.admin("PUT", "/v1/experts", raw=envelope(1, trivial()).encode())
    assert (status, doc["reason"]) == (404, "UnsupportedByEngine")
    odd = pod_factory(
        PodOptions(model="qwen3-30b-a3b", hardware="h200", speedup=20.0,
                   engine_args=["--tp", "4", "--ep-num-redundant-experts", "30"])
    )  # fmt: skip
    status, doc = odd.admin("GET", "/v1/experts")
    assert (status, doc["supported"]) == (200, False)
    assert "158" in doc["unsupportedReason"] or "30 redundant" in doc["unsupportedReason"]
    # The engine serves regardless.
    assert odd.admin("GET", "/readyz", auth=False)[0] == 200
