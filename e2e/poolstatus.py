"""Reading an InferencePool's status in e2e tests: the object, one condition, the decision log."""

from __future__ import annotations

import json
from typing import Any

from e2e.harness.kube import condition

__all__ = ["CRD", "condition", "get_pool", "pool_decisions"]

CRD = "inferencepools.semipd.io"


def get_pool(cluster: Any, namespace: str, name: str) -> dict[str, Any]:
    """The InferencePool as `kubectl get -o json` returns it."""
    doc: dict[str, Any] = json.loads(cluster.kubectl("get", CRD, name, "-n", namespace, "-o", "json").stdout)
    return doc


def pool_decisions(obj: dict[str, Any], action: str | None = None) -> list[dict[str, Any]]:
    """The status decision log, optionally only one action's entries."""
    out = (obj.get("status") or {}).get("decisions") or []
    return [d for d in out if action is None or d["action"] == action]
