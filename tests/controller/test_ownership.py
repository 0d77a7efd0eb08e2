"""Ownership before apply: only objects with our label and an ownerReference to this pool are ours."""

from __future__ import annotations

from typing import Any

from semipd.controller.plan import ADOPT_ANNOTATION, conflict_with, ours

UID = "pool-uid"
REF = {"apiVersion": "semipd.io/v1alpha1", "kind": "InferencePool", "name": "shop", "uid": UID, "controller": True}
LABELS = {"app.kubernetes.io/managed-by": "semipd-operator"}


def obj(
    labels: dict[str, str] | None = None, refs: list[dict[str, Any]] | None = None, **annotations: str
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "shop-h200", "namespace": "ns", "labels": labels or {}, "annotations": annotations}
    if refs is not None:
        meta["ownerReferences"] = refs
    return {"kind": "Deployment", "metadata": meta}


def test_ours_needs_the_label_and_a_controller_reference_to_this_pool() -> None:
    assert ours(obj(LABELS, [REF]), UID)
    assert not ours(obj(LABELS, []), UID)
    assert not ours(obj({}, [REF]), UID)
    assert not ours(obj(LABELS, [{**REF, "uid": "another-pool"}]), UID)
    assert not ours(obj(LABELS, [{**REF, "controller": False}]), UID)
    assert not ours(obj(LABELS, [{**REF, "kind": "ReplicaSet"}]), UID)


def test_a_foreign_object_is_a_conflict_naming_it_and_the_way_out() -> None:
    message = conflict_with(obj(), UID, "shop")
    assert message is not None
    assert "Deployment ns/shop-h200" in message
    assert f"{ADOPT_ANNOTATION}=shop" in message
    assert conflict_with(None, UID, "shop") is None
    assert conflict_with(obj(LABELS, [REF]), UID, "shop") is None


def test_adoption_only_by_an_explicit_annotation_naming_the_pool() -> None:
    assert conflict_with(obj(**{ADOPT_ANNOTATION: "shop"}), UID, "shop") is None
    assert conflict_with(obj(**{ADOPT_ANNOTATION: "true"}), UID, "shop") is not None
    assert conflict_with(obj(**{ADOPT_ANNOTATION: "other"}), UID, "shop") is not None
    # Another pool's object with a colliding name is as foreign as a user's.
    assert conflict_with(obj(LABELS, [{**REF, "uid": "another-pool"}]), UID, "shop") is not None


def test_a_rotated_key_marks_our_token_secret_stale() -> None:
    import base64

    from semipd.controller.reconcile import _stale_token
    from semipd.desired.children import TOKEN_KEY
    from semipd.desired.names import TOKEN_HASH_ANNOTATION
    from semipd.desired.workload import token_hash

    intent = {"data": {TOKEN_KEY: base64.b64encode(b"new-token").decode()}}

    def deployment(token: str) -> dict[str, Any]:
        return {"spec": {"template": {"metadata": {"annotations": {TOKEN_HASH_ANNOTATION: token_hash(token)}}}}}

    assert not _stale_token(intent, [deployment("new-token"), deployment("new-token")])
    assert _stale_token(intent, [deployment("new-token"), deployment("old-token")])
