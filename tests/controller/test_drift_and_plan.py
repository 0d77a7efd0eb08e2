from __future__ import annotations

from typing import Any

from semipd.controller.drift import carries, quantity
from semipd.controller.plan import key_of, plan_children
from semipd.desired.workload import intent_digest


def _dep(replicas: int = 1, image: str = "a") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "ns", "labels": {"x": "1"}},
        "spec": {
            "replicas": replicas,
            "template": {
                "spec": {
                    "containers": [
                        {"name": "c", "image": image, "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}
                    ]
                }
            },
        },
    }


def _live(intent: dict[str, Any]) -> dict[str, Any]:
    live: dict[str, Any] = __import__("copy").deepcopy(intent)
    live["metadata"] |= {"resourceVersion": "7", "labels": {"x": "1", "other": "y"}}
    c = live["spec"]["template"]["spec"]["containers"][0]
    c |= {"terminationMessagePath": "/dev/termination-log", "imagePullPolicy": "IfNotPresent"}
    c["resources"]["limits"]["cpu"] = "1000m"
    c["resources"]["limits"]["memory"] = "1024Mi"
    return live


def test_live_object_with_defaults_and_canonical_quantities_still_carries_the_intent() -> None:
    assert carries(_dep(), _live(_dep()))


def test_drift_in_replicas_or_image_is_seen() -> None:
    assert not carries(_dep(replicas=1), _live(_dep(replicas=3)))
    assert not carries(_dep(image="a"), _live(_dep(image="b")))


def test_omitted_zero_values_count_as_present() -> None:
    assert carries({"spec": {"publishNotReadyAddresses": False, "x": 0}}, {"spec": {}})
    assert not carries({"spec": {"publishNotReadyAddresses": True}}, {"spec": {}})


def test_list_length_changes_are_drift() -> None:
    assert not carries({"a": [1, 2]}, {"a": [1]})


def test_quantities() -> None:
    assert quantity("500m") == quantity("0.5")
    assert quantity("1Gi") == quantity("1024Mi")
    assert quantity("lots") is None
    # Everything Kubernetes accepts (kubernetes.utils.parse_quantity), exponents included.
    assert quantity("1e3") == quantity("1k")
    assert quantity("12E-3") == quantity("12m")
    assert quantity(2) == quantity("2000m")
    assert carries({"requests": {"cpu": "1e3m"}}, {"requests": {"cpu": "1"}})


def test_plan_applies_only_missing_or_drifted_and_prunes_unwanted() -> None:
    want = _dep()
    stale = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "gone", "namespace": "ns"}}
    live = {key_of(want): _live(want), key_of(stale): stale}
    plan = plan_children([want], live, [key_of(want), key_of(stale)], {})
    assert plan.apply == []
    assert plan.prune == [key_of(stale)]
    drifted = {key_of(want): _live(_dep(replicas=5))}
    assert plan_children([want], drifted, [key_of(want)], {}).apply == [want]
    assert plan_children([want], {}, [], {}).apply == [want]


def test_secrets_are_applied_once_per_intent() -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "t", "namespace": "ns"}, "data": {"k": "dg=="}}
    assert plan_children([secret], {}, [], {}).apply == [secret]
    applied = {key_of(secret): intent_digest(secret)}
    assert plan_children([secret], {}, [], applied).apply == []
    changed = {**secret, "data": {"k": "eA=="}}
    assert plan_children([changed], {}, [], applied).apply == [changed]
    # Never pruned: the operator cannot see Secrets it did not just apply.
    assert plan_children([], {}, [key_of(secret)], applied).prune == []
