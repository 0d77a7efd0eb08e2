"""Builders of the pool-level children: agent token Secret, headless Service, PodDisruptionBudgets
and Gateway API Inference Extension InferencePools. Pure: same inputs, same objects.
"""

from __future__ import annotations

import base64
from typing import Any

from semipd.api.v1alpha1 import Accelerator, InferencePoolSpec, NodePool
from semipd.desired import names
from semipd.desired.owner import Owner

TOKEN_KEY = "token"
GIE_API_VERSION = "inference.networking.k8s.io/v1"


def agent_token_secret(owner: Owner, token: str) -> dict[str, Any]:
    """The Secret the agents read their admin bearer token from (the token is generated once, elsewhere)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": owner.metadata(names.token_secret_name(owner.name), names.pool_labels(owner.name)),
        "type": "Opaque",
        # `data`, not `stringData`: the live object then compares field-for-field with the intent.
        "data": {TOKEN_KEY: base64.b64encode(token.encode()).decode()},
    }


def headless_service(owner: Owner, spec: InferencePoolSpec) -> dict[str, Any]:
    """One headless Service over all engine pods, for DNS and for routers that list endpoints."""
    ports = spec.engine.ports
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": owner.metadata(names.service_name(owner.name), names.pool_labels(owner.name)),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": False,
            "selector": {names.POOL_LABEL: owner.name},
            "ports": [
                {"name": "http", "port": ports.http, "targetPort": ports.http, "protocol": "TCP"},
                {"name": "admin", "port": ports.admin, "targetPort": ports.admin, "protocol": "TCP"},
            ],
        },
    }


def disruption_budget(owner: Owner, node_pool: NodePool) -> dict[str, Any]:
    """At most one engine pod of a node pool voluntarily down at a time (drains, restarts to re-split)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": owner.metadata(names.workload_name(owner.name, node_pool.name), names.pool_labels(owner.name)),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": names.node_pool_selector(owner.name, node_pool)},
        },
    }


def gie_inference_pools(owner: Owner, spec: InferencePoolSpec) -> list[dict[str, Any]]:
    """One GIE InferencePool per accelerator vendor: GIE pools must be accelerator-homogeneous."""
    vendors = sorted({p.accelerator for p in spec.node_pools}, key=lambda a: a.value)
    return [_gie_pool(owner, spec, vendor) for vendor in vendors]


def _gie_pool(owner: Owner, spec: InferencePoolSpec, vendor: Accelerator) -> dict[str, Any]:
    body: dict[str, Any] = {
        "selector": {"matchLabels": {names.POOL_LABEL: owner.name, names.ACCELERATOR_LABEL: vendor.value}},
        "targetPorts": [{"number": spec.engine.ports.http}],
    }
    picker = spec.routing.endpoint_picker
    if picker is not None:
        body["endpointPickerRef"] = {
            "kind": "Service",
            "name": picker.name,
            "port": {"number": picker.port},
            "failureMode": picker.failure_mode.value,
        }
    return {
        "apiVersion": GIE_API_VERSION,
        "kind": "InferencePool",
        "metadata": owner.metadata(names.gie_pool_name(owner.name, vendor), names.pool_labels(owner.name)),
        "spec": body,
    }
