"""The owning InferencePool as builders see it: name, namespace and uid for ownerReferences."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from semipd.api.v1alpha1 import API_VERSION, KIND


@dataclass(frozen=True)
class Owner:
    """Identity of the InferencePool that owns the objects being built."""

    name: str
    namespace: str
    uid: str

    def reference(self) -> dict[str, Any]:
        """A controller ownerReference; garbage collection deletes children with their owner."""
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }

    def metadata(self, name: str, labels: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
        """Metadata of a child object."""
        meta: dict[str, Any] = {
            "name": name,
            "namespace": self.namespace,
            "labels": labels,
            "ownerReferences": [self.reference()],
        }
        if annotations:
            meta["annotations"] = annotations
        return meta
