"""In-memory copies of the objects the operator owns, fed by Kopf watch events (never by polling).

Keyed by (kind, namespace, name); each entry is the latest body, with what the operator never reads
of a Pod left out (its managedFields and spec: Pods are the bulk of a fleet, 10x the Deployments).
Reconcile reads children from here, so a steady-state reconcile makes no API requests at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from semipd.desired import names

Key = tuple[str, str, str]
POD = "v1/Pod"
DEPLOYMENT = "apps/v1/Deployment"
POD_SPEC_KEPT = ("nodeName",)


def slim(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    """The part of a body worth keeping: all of it, except a Pod's managedFields and spec (bar nodeName),
    which no reader uses (a 5,000-pod soak measured them as most of the operator's memory). The
    apiVersion and kind come from `kind` where the body lacks them: the items of a list carry neither,
    and an intent compared with such a copy looked drifted (a restarted operator re-applied every
    Service it had just listed)."""
    api_version, _, short = kind.rpartition("/")
    if not (body.get("apiVersion") and body.get("kind")):
        body = {**body, "apiVersion": body.get("apiVersion") or api_version, "kind": body.get("kind") or short}
    if kind != POD:
        return body
    meta = {k: v for k, v in (body.get("metadata") or {}).items() if k != "managedFields"}
    spec = body.get("spec") or {}
    return {**body, "metadata": meta, "spec": {k: spec[k] for k in POD_SPEC_KEPT if k in spec}}


@dataclass
class ObjectCache:
    """Latest bodies of watched objects, indexed by (kind, namespace) and by controller owner too:
    every reconcile and evaluation looks up one pool's children, so no lookup scans the fleet."""

    objects: dict[Key, dict[str, Any]] = field(default_factory=dict)
    scopes: dict[tuple[str, str], dict[str, dict[str, Any]]] = field(default_factory=dict)
    owners: dict[str, set[Key]] = field(default_factory=dict)
    owner_of: dict[Key, str] = field(default_factory=dict)

    def put(self, kind: str, body: dict[str, Any]) -> None:
        meta = body.get("metadata", {})
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        key = (kind, ns, name)
        kept = slim(kind, body)
        self._unown(key)
        self.objects[key] = kept
        self.scopes.setdefault((kind, ns), {})[name] = kept
        uid = next((r.get("uid") for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
        if uid:
            self.owners.setdefault(uid, set()).add(key)
            self.owner_of[key] = uid

    def _unown(self, key: Key) -> None:
        uid = self.owner_of.pop(key, None)
        if uid is not None:
            keys = self.owners.get(uid, set())
            keys.discard(key)
            if not keys:
                self.owners.pop(uid, None)

    def drop(self, kind: str, namespace: str, name: str) -> None:
        self.objects.pop((kind, namespace, name), None)
        self._unown((kind, namespace, name))
        scope = self.scopes.get((kind, namespace))
        if scope is not None:
            scope.pop(name, None)
            if not scope:
                del self.scopes[(kind, namespace)]

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((kind, namespace, name))

    def deployments(self, namespace: str, pool: str, node_pools: Iterable[str]) -> dict[str, dict[str, Any] | None]:
        """Each node pool's Deployment of `pool` as cached (None: not listed or not created yet)."""
        return {np: self.get(DEPLOYMENT, namespace, names.workload_name(pool, np)) for np in node_pools}

    def owned_by(self, uid: str, kind: str | None = None) -> Iterator[tuple[Key, dict[str, Any]]]:
        """Objects whose controller ownerReference is `uid` (in key order)."""
        for key in sorted(self.owners.get(uid, ())):
            if kind is None or key[0] == kind:
                yield key, self.objects[key]

    def labelled(self, kind: str, namespace: str, labels: dict[str, str]) -> list[dict[str, Any]]:
        """Objects of `kind` in `namespace` carrying all of `labels`."""
        out = []
        for body in self.scopes.get((kind, namespace), {}).values():
            have = body.get("metadata", {}).get("labels") or {}
            if all(have.get(a) == b for a, b in labels.items()):
                out.append(body)
        return out
