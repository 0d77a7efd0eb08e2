"""In-memory copies of the objects the operator owns, fed by Kopf watch events (never by polling).

Keyed by (kind, namespace, name); each entry is the latest raw body. Reconcile reads children from
here, so a steady-state reconcile makes no API requests at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

Key = tuple[str, str, str]


@dataclass
class ObjectCache:
    """Latest bodies of watched objects."""

    objects: dict[Key, dict[str, Any]] = field(default_factory=dict)

    def put(self, kind: str, body: dict[str, Any]) -> None:
        meta = body.get("metadata", {})
        self.objects[(kind, meta.get("namespace", ""), meta.get("name", ""))] = body

    def drop(self, kind: str, namespace: str, name: str) -> None:
        self.objects.pop((kind, namespace, name), None)

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((kind, namespace, name))

    def owned_by(self, uid: str, kind: str | None = None) -> Iterator[tuple[Key, dict[str, Any]]]:
        """Objects whose controller ownerReference is `uid`."""
        for key, body in self.objects.items():
            if kind is not None and key[0] != kind:
                continue
            refs = body.get("metadata", {}).get("ownerReferences") or []
            if any(r.get("uid") == uid and r.get("controller") for r in refs):
                yield key, body

    def labelled(self, kind: str, namespace: str, labels: dict[str, str]) -> list[dict[str, Any]]:
        """Objects of `kind` in `namespace` carrying all of `labels`."""
        out = []
        for (k, ns, _), body in self.objects.items():
            have = body.get("metadata", {}).get("labels") or {}
            if k == kind and ns == namespace and all(have.get(a) == b for a, b in labels.items()):
                out.append(body)
        return out
