"""Routing builders: llm-d context-length-range pod labels and the HTTPRoute over the GIE pools.

The Gateway API CRDs are not available to the tests (only the GIE InferencePool CRD is, under
semipd/data/crds), so the HTTPRoute is checked against the constraints of the upstream v1
HTTPRoute schema (kubernetes-sigs/gateway-api `config/crd/standard/
gateway.networking.k8s.io_httproutes.yaml`), restated in `check_httproute_v1` below.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from semipd.api.v1alpha1 import Accelerator, GatewayParentRef, InferencePoolSpec, KVCachePlacementStatus
from semipd.desired import names
from semipd.desired.children import gie_inference_pools
from semipd.desired.owner import Owner
from semipd.desired.pool import desired_children
from semipd.desired.routing import (
    CONTEXT_CLASS_HEADER,
    CONTEXT_RANGE_LABEL,
    context_ranges,
    http_route,
    pod_label_patches,
    vendor_weights,
)
from semipd.desired.workload import WorkloadSettings
from semipd.policy.kvcache import KVPoolObservation, plan_kv_placement

OWNER = Owner("chat", "ml", "uid-1")
T0 = "2026-01-01T00:00:00Z"
HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$")
OBJECT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def spec(pools: list[dict[str, Any]] | None = None, threshold: int = 8192) -> InferencePoolSpec:
    return InferencePoolSpec.model_validate(
        {
            "model": {"name": "m", "source": "hf://m/m", "maxContextLength": 131072, "profile": "llama-3-8b"},
            "engine": {"kind": "sim"},
            "nodePools": pools
            or [
                {"name": "h200", "accelerator": "nvidia", "kvCacheTokens": 400_000},
                {"name": "h100", "accelerator": "nvidia", "kvCacheTokens": 100_000},
                {"name": "ascend", "accelerator": "ascend", "kvCacheTokens": 200_000},
            ],
            "slo": {"ttftP99": "1s", "itlP99": "60ms"},
            "placement": {"kvCache": {"longContextThreshold": threshold}},
        }
    )


def placement(s: InferencePoolSpec, **pools: tuple[int, float | None]) -> KVCachePlacementStatus:
    observed = {n: KVPoolObservation(n, ready, usage) for n, (ready, usage) in pools.items()}
    return plan_kv_placement(s, observed, None, T0)


def pod(name: str, node_pool: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "labels": {names.POOL_LABEL: "chat", names.NODE_POOL_LABEL: node_pool, **(labels or {})},
        }
    }


# --------------------------------------------------------------------------- pod labels


def test_label_key_is_llm_d_context_length_range() -> None:
    assert CONTEXT_RANGE_LABEL == "llm-d.ai/context-length-range"


def test_pods_get_their_node_pools_range_and_only_when_it_differs() -> None:
    s = spec()
    status = placement(s, h200=(1, 0.0), h100=(1, 0.0), ascend=(1, 0.0))
    assert status.long_context_pools == ["h200"]
    ranges = context_ranges(status)
    assert ranges == {"h200": "0-131072", "h100": "0-8192", "ascend": "0-8192"}
    pods = [
        pod("a", "h200"),
        pod("b", "ascend", {CONTEXT_RANGE_LABEL: "0-8192"}),  # already right: left alone
        pod("c", "ascend", {CONTEXT_RANGE_LABEL: "0-131072"}),  # stale value: relabelled
        pod("d", "gone"),  # a node pool not in the placement: no label to give
    ]
    patches = pod_label_patches(pods, status)
    assert patches == [
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "a", "namespace": "ml", "labels": {CONTEXT_RANGE_LABEL: "0-131072"}}},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "c", "namespace": "ml", "labels": {CONTEXT_RANGE_LABEL: "0-8192"}}},
    ]  # fmt: skip
    for value in ranges.values():
        assert len(value) <= 63
        assert LABEL_VALUE.match(value)


def test_a_placement_that_does_not_steer_labels_no_new_pod_and_widens_old_labels() -> None:
    s = spec(threshold=131072)  # at the model's maximum: nothing is long
    status = placement(s, h200=(1, 0.0), h100=(1, 0.0), ascend=(1, 0.0))
    assert status.reason == "ThresholdAtMaxContext"
    pods = [pod("a", "h200"), pod("b", "ascend", {CONTEXT_RANGE_LABEL: "0-8192"})]
    assert pod_label_patches(pods, status) == [
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "b", "namespace": "ml", "labels": {CONTEXT_RANGE_LABEL: "0-131072"}}},
    ]  # fmt: skip
    assert pod_label_patches([pod("b", "ascend", {CONTEXT_RANGE_LABEL: "0-131072"})], status) == []


def test_no_placement_means_no_labels() -> None:
    assert pod_label_patches([pod("a", "h200")], None) == []
    assert context_ranges(None) == {}


# --------------------------------------------------------------------------- weights


def test_vendor_weights_sum_the_node_pools_of_each_vendor() -> None:
    s = spec()
    status = placement(s, h200=(1, 0.0), h100=(2, 0.0), ascend=(1, 0.0))
    by_pool = {p.name: p for p in status.pools}
    long = vendor_weights(s, status, long=True)
    short = vendor_weights(s, status, long=False)
    assert long == {Accelerator.ASCEND: 0, Accelerator.NVIDIA: 100}
    assert short[Accelerator.NVIDIA] == by_pool["h200"].short_weight + by_pool["h100"].short_weight
    assert short[Accelerator.ASCEND] == by_pool["ascend"].short_weight
    # 400k + 2 x 100k of 800k total KV tokens on NVIDIA, 200k on Ascend.
    assert short == {Accelerator.ASCEND: 25, Accelerator.NVIDIA: 75}


def test_long_weight_moves_to_the_vendor_with_headroom() -> None:
    s = spec()
    status = placement(s, h200=(1, 0.9), h100=(1, 0.9), ascend=(1, 0.0))
    assert status.long_context_pools == ["ascend"]
    assert vendor_weights(s, status, long=True) == {Accelerator.ASCEND: 100, Accelerator.NVIDIA: 0}


def test_without_placement_or_ready_replicas_every_vendor_gets_weight_one() -> None:
    s = spec()
    assert vendor_weights(s, None, long=True) == {Accelerator.ASCEND: 1, Accelerator.NVIDIA: 1}
    empty = placement(s, h200=(0, None), h100=(0, None), ascend=(0, None))
    assert vendor_weights(s, empty, long=False) == {Accelerator.ASCEND: 1, Accelerator.NVIDIA: 1}


# --------------------------------------------------------------------------- HTTPRoute


def check_httproute_v1(route: dict[str, Any]) -> None:
    """The upstream gateway.networking.k8s.io/v1 HTTPRoute schema's constraints on what we set."""
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert route["kind"] == "HTTPRoute"
    assert OBJECT_NAME.match(route["metadata"]["name"])
    assert len(route["metadata"]["name"]) <= 253
    spec_ = route["spec"]
    assert set(spec_) <= {"parentRefs", "hostnames", "rules"}
    assert len(spec_.get("parentRefs", [])) <= 32
    for ref in spec_.get("parentRefs", []):
        assert set(ref) <= {"group", "kind", "namespace", "name", "sectionName", "port"}
        assert 1 <= len(ref["name"]) <= 253
    assert 1 <= len(spec_["rules"]) <= 16
    for rule in spec_["rules"]:
        assert set(rule) <= {"name", "matches", "filters", "backendRefs", "timeouts", "retry", "sessionPersistence"}
        assert 1 <= len(rule["matches"]) <= 64
        for m in rule["matches"]:
            assert set(m) <= {"path", "headers", "queryParams", "method"}
            assert m["path"]["type"] in ("Exact", "PathPrefix", "RegularExpression")
            assert m["path"]["value"].startswith("/")
            assert len(m["path"]["value"]) <= 1024
            headers = m.get("headers", [])
            assert len(headers) <= 16
            assert len({h["name"].lower() for h in headers}) == len(headers)  # listType map keyed by name
            for h in headers:
                assert h["type"] in ("Exact", "RegularExpression")
                assert HEADER_NAME.match(h["name"])
                assert 1 <= len(h["name"]) <= 256
                assert 1 <= len(h["value"]) <= 4096
        assert len(rule["backendRefs"]) <= 16
        for ref in rule["backendRefs"]:
            assert set(ref) <= {"group", "kind", "name", "namespace", "port", "weight", "filters"}
            assert 1 <= len(ref["name"]) <= 253
            assert 0 <= ref["weight"] <= 1_000_000
            # CEL: a port is required only for core Services.
            assert (ref["group"], ref["kind"]) != ("", "Service") or "port" in ref


def test_http_route_weights_each_gie_pool_per_request_class() -> None:
    s = spec()
    status = placement(s, h200=(1, 0.9), h100=(1, 0.9), ascend=(1, 0.0))
    route = http_route(OWNER, s, status)
    check_httproute_v1(route)
    gie = {p["metadata"]["name"] for p in gie_inference_pools(OWNER, s)}
    long_rule, default_rule = route["spec"]["rules"]
    assert long_rule["matches"][0]["headers"] == [{"type": "Exact", "name": CONTEXT_CLASS_HEADER, "value": "long"}]
    assert "headers" not in default_rule["matches"][0]
    for rule in (long_rule, default_rule):
        assert {r["name"] for r in rule["backendRefs"]} == gie
        assert all(
            (r["group"], r["kind"]) == ("inference.networking.k8s.io", "InferencePool") for r in rule["backendRefs"]
        )
    weights = {r["name"]: r["weight"] for r in long_rule["backendRefs"]}
    assert weights == {"chat-ascend": 100, "chat-nvidia": 0}
    short = {r["name"]: r["weight"] for r in default_rule["backendRefs"]}
    # One replica each: 400k + 100k of 700k KV tokens on NVIDIA (71.4 %), 200k on Ascend (28.6 %).
    assert short == {"chat-ascend": 29, "chat-nvidia": 71}
    # Gateway API precedence: same path, so the rule with more header matches wins when the header is set.
    assert len(long_rule["matches"][0]["headers"]) > len(default_rule["matches"][0].get("headers", []))
    assert long_rule["matches"][0]["path"] == default_rule["matches"][0]["path"]


def test_http_route_is_owned_labelled_and_names_no_gateway() -> None:
    route = http_route(OWNER, spec(), None)
    meta = route["metadata"]
    assert meta["namespace"] == "ml"
    assert meta["ownerReferences"] == [OWNER.reference()]
    assert meta["labels"][names.POOL_LABEL] == "chat"
    assert meta["labels"]["app.kubernetes.io/managed-by"] == names.MANAGED_BY
    assert "parentRefs" not in route["spec"]  # routing.gatewayParentRefs is empty: the route stays unattached


def test_http_route_attaches_to_the_gateways_the_spec_names() -> None:
    s = spec()
    refs = [{"name": "inference-gw"}, {"name": "edge", "namespace": "gateways", "sectionName": "https"}]
    s = s.model_copy(update={"routing": s.routing.model_copy(update={"gateway_parent_refs": [
        GatewayParentRef.model_validate(r) for r in refs]})})  # fmt: skip
    route = http_route(OWNER, s, None)
    check_httproute_v1(route)
    assert route["spec"]["parentRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "inference-gw"},
        {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "edge", "namespace": "gateways",
         "sectionName": "https"},
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("gie", "httproute", "want"),
    [(True, True, True), (True, False, False), (False, True, False), (False, False, False)],
)
def test_desired_children_have_the_route_only_with_both_crds(gie: bool, httproute: bool, want: bool) -> None:
    s = spec()
    status = placement(s, h200=(1, 0.0), h100=(1, 0.0), ascend=(1, 0.0))
    out = desired_children(
        OWNER, s, token="t" * 64, replicas={np.name: 1 for np in s.node_pools}, settings=WorkloadSettings(),
        gie_installed=gie, httproute_installed=httproute, kv_cache=status,
    )  # fmt: skip
    routes = [c for c in out if c["kind"] == "HTTPRoute"]
    assert len(routes) == (1 if want else 0)
    if want:
        assert routes[0] == http_route(OWNER, s, status)


def test_pod_template_carries_no_context_range() -> None:
    s = spec()
    status = placement(s, h200=(1, 0.0), h100=(1, 0.0), ascend=(1, 0.0))
    out = desired_children(
        OWNER, s, token="t" * 64, replicas={np.name: 1 for np in s.node_pools}, settings=WorkloadSettings(),
        gie_installed=True, httproute_installed=True, kv_cache=status,
    )  # fmt: skip
    for dep in (c for c in out if c["kind"] == "Deployment"):
        assert CONTEXT_RANGE_LABEL not in dep["spec"]["template"]["metadata"]["labels"]
