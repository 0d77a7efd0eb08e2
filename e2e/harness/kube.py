"""Thin helpers over the `kubernetes` client used by the harness and the tests."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config, dynamic

FIELD_MANAGER = "semipd-e2e-harness"


def api_client(kubeconfig: Path) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(kubeconfig))


def dynamic_client(kubeconfig: Path) -> dynamic.DynamicClient:
    return dynamic.DynamicClient(api_client(kubeconfig))


def apply(dyn: dynamic.DynamicClient, obj: dict[str, Any]) -> Any:
    """Server-side apply one object (dict manifest) and return the result."""
    res = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    ns = obj["metadata"].get("namespace") if res.namespaced else None
    return res.server_side_apply(
        body=obj, name=obj["metadata"]["name"], namespace=ns, field_manager=FIELD_MANAGER, force_conflicts=True
    )


def apply_all(dyn: dynamic.DynamicClient, objs: Iterable[dict[str, Any]]) -> list[Any]:
    return [apply(dyn, o) for o in objs]


def load_yaml(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    """The condition of `type_` in the object's status ({} when absent)."""
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}.get(type_, {})
