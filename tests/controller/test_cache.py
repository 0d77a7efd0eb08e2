"""The object cache: what it keeps of a Pod, and its (kind, namespace) index agreeing with its lookups."""

from __future__ import annotations

from typing import Any

from semipd.controller.cache import POD, ObjectCache, slim


def pod(name: str, ns: str = "a", pool: str = "p") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"semipd.io/pool": pool}, "uid": f"u-{name}",
                     "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]},
        "spec": {"nodeName": "n-1", "containers": [{"name": "engine", "env": [{"name": "X", "value": "1"}]}]},
        "status": {"podIP": "127.1.0.5", "conditions": [{"type": "Ready", "status": "True"}]},
    }  # fmt: skip


def test_a_pod_keeps_metadata_status_and_node_but_not_managed_fields_or_spec() -> None:
    body = pod("x")
    kept = slim(POD, body)
    assert "managedFields" not in kept["metadata"]
    assert kept["metadata"]["labels"] == {"semipd.io/pool": "p"}
    assert kept["spec"] == {"nodeName": "n-1"}
    assert kept["status"] == body["status"]
    assert body["metadata"]["managedFields"]  # the event's body is not changed
    assert body["spec"]["containers"]


def test_a_listed_item_gets_its_api_version_and_kind_from_the_key() -> None:
    listed = {"metadata": {"name": "s", "namespace": "a"}, "spec": {"clusterIP": "None"}}
    assert slim("v1/Service", listed) == {**listed, "apiVersion": "v1", "kind": "Service"}
    assert slim("apps/v1/Deployment", listed)["apiVersion"] == "apps/v1"
    assert "kind" not in listed  # the event's body is not changed


def test_other_kinds_are_kept_whole() -> None:
    meta = {"name": "d", "namespace": "a", "managedFields": [{"manager": "semipd"}]}
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {"x": 1}}
    assert slim("apps/v1/Deployment", dep) is dep


def test_labelled_reads_only_its_kind_and_namespace_and_follows_drops() -> None:
    cache = ObjectCache()
    for name, ns, pool in (("a1", "a", "p"), ("a2", "a", "q"), ("b1", "b", "p")):
        cache.put(POD, pod(name, ns, pool))
    cache.put("v1/Service", {"metadata": {"name": "s", "namespace": "a", "labels": {"semipd.io/pool": "p"}}})
    assert [b["metadata"]["name"] for b in cache.labelled(POD, "a", {"semipd.io/pool": "p"})] == ["a1"]
    cache.put(POD, pod("a1", "a", "q"))  # relabelled: the index holds the newest body
    assert cache.labelled(POD, "a", {"semipd.io/pool": "p"}) == []
    cache.drop(POD, "a", "a2")
    cache.drop(POD, "a", "a1")
    assert cache.get(POD, "a", "a1") is None
    assert cache.labelled(POD, "a", {}) == []
    assert (POD, "a") not in cache.scopes
    assert [b["metadata"]["name"] for b in cache.labelled(POD, "b", {"semipd.io/pool": "p"})] == ["b1"]


def owned(name: str, uid: str | None, controller: bool = True) -> dict[str, Any]:
    refs = [{"uid": uid, "controller": controller, "kind": "InferencePool", "name": "p"}] if uid else []
    return {"metadata": {"name": name, "namespace": "a", "ownerReferences": refs}}


def test_owned_by_follows_puts_drops_and_owner_changes() -> None:
    cache = ObjectCache()
    cache.put("apps/v1/Deployment", owned("d1", "u1"))
    cache.put("v1/Service", owned("s1", "u1"))
    cache.put("v1/Service", owned("s2", "u2"))
    cache.put("v1/Service", owned("s3", "u1", controller=False))  # an owner, but not the controller
    assert [k for k, _ in cache.owned_by("u1")] == [("apps/v1/Deployment", "a", "d1"), ("v1/Service", "a", "s1")]
    assert [k for k, _ in cache.owned_by("u1", "v1/Service")] == [("v1/Service", "a", "s1")]
    cache.put("v1/Service", owned("s1", "u2"))  # the owner changed
    assert [k[2] for k, _ in cache.owned_by("u2")] == ["s1", "s2"]
    cache.put("v1/Service", owned("s2", None))  # the ownerReference was removed
    cache.drop("apps/v1/Deployment", "a", "d1")
    assert list(cache.owned_by("u1")) == []
    assert [k[2] for k, _ in cache.owned_by("u2")] == ["s1"]
    assert cache.owners == {"u2": {("v1/Service", "a", "s1")}}
