"""Builders that publish the KV-cache placement to routers (pure): llm-d context-length-range pod
labels and a Gateway API HTTPRoute with per-vendor weights on the GIE InferencePools.

The labels are not part of the Deployment's pod template: a changing template label would restart
every pod. The operator labels live Ready pods instead (`pod_label_patches`, server-side apply of
one label under its field manager), and only when the value changes; a new pod is labelled at the
next evaluation or when its Ready transition wakes reconcile. Until then it carries no range, which
llm-d's context-length-aware scorer scores as neutral (0.5).

The HTTPRoute has two rules over the same backends: requests carrying the header
`x-semipd-context-class: long` (set by a gateway filter, the EPP or the client; Gateway API cannot
match on prompt length itself) get the long-prompt weights, every other request the short-prompt
weights. Gateway API gives the rule with more header matches precedence, so the long rule wins when
its header is present. No parentRefs: the spec has no field naming the Gateway, so the route is
inert until someone attaches it (parentRefs set under another field manager survive our applies).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from semipd.api.v1alpha1 import Accelerator, InferencePoolSpec, KVCachePlacementStatus
from semipd.desired import names
from semipd.desired.owner import Owner
from semipd.policy.kvcache import steers

CONTEXT_RANGE_LABEL = "llm-d.ai/context-length-range"
"""llm-d's context-length-aware scorer reads `min-max` prompt tokens from this pod label."""
CONTEXT_CLASS_HEADER = "x-semipd-context-class"
LONG_CLASS = "long"
HTTPROUTE_API_VERSION = "gateway.networking.k8s.io/v1"
GIE_GROUP = "inference.networking.k8s.io"
MAX_WEIGHT = 1_000_000
"""Gateway API's upper bound for a backendRef weight."""


def context_ranges(status: KVCachePlacementStatus | None) -> dict[str, str]:
    """The context-length-range label value of each node pool under `status` (none without a placement)."""
    if status is None:
        return {}
    return {p.name: p.context_range for p in status.pools if p.context_range}


def pod_label_patches(pods: Sequence[Mapping[str, Any]], status: KVCachePlacementStatus | None) -> list[dict[str, Any]]:
    """Server-side-apply bodies labelling each given pod with its node pool's context range, for the
    pods whose label differs (the caller passes the live Ready pods).

    A placement that does not steer (policy off, threshold at the model's maximum) labels no new pod
    (every pool takes every length, which is what an unlabelled pod means) and only widens labels
    left from an earlier steering placement, so a default install never writes a pod.
    """
    ranges = context_ranges(status)
    steering = steers(status)
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        want = ranges.get(labels.get(names.NODE_POOL_LABEL, ""))
        have = labels.get(CONTEXT_RANGE_LABEL)
        if want is None or have == want or (have is None and not steering):
            continue
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": meta["name"],
                    "namespace": meta["namespace"],
                    "labels": {CONTEXT_RANGE_LABEL: want},
                },
            }
        )
    return out


def _vendors(spec: InferencePoolSpec) -> list[Accelerator]:
    return sorted({p.accelerator for p in spec.node_pools}, key=lambda a: a.value)


def vendor_weights(
    spec: InferencePoolSpec, status: KVCachePlacementStatus | None, long: bool
) -> dict[Accelerator, int]:
    """Per GIE pool (vendor) weight of one request class: the sum of its node pools' weights in status.

    Without a placement, or when every weight is 0 (no ready replicas), every vendor gets 1: the
    route must not send everything to an error, and each GIE pool's picker sees its own endpoints.
    """
    vendor_of = {p.name: p.accelerator for p in spec.node_pools}
    out = dict.fromkeys(_vendors(spec), 0)
    for p in status.pools if status is not None else []:
        vendor = vendor_of.get(p.name)
        if vendor is not None:
            out[vendor] += p.long_weight if long else p.short_weight
    if not any(out.values()):
        return dict.fromkeys(out, 1)
    return {v: min(w, MAX_WEIGHT) for v, w in out.items()}


def http_route_name(pool: str) -> str:
    """The HTTPRoute an InferencePool owns."""
    return f"{pool}-context"


def _backends(owner: Owner, weights: Mapping[Accelerator, int]) -> list[dict[str, Any]]:
    return [
        {"group": GIE_GROUP, "kind": "InferencePool", "name": names.gie_pool_name(owner.name, vendor), "weight": w}
        for vendor, w in weights.items()
    ]


def http_route(owner: Owner, spec: InferencePoolSpec, status: KVCachePlacementStatus | None) -> dict[str, Any]:
    """The HTTPRoute over the InferencePool's GIE pools: a long-context rule and a default rule."""
    everything = {"type": "PathPrefix", "value": "/"}
    long_match = {"path": everything, "headers": [{"type": "Exact", "name": CONTEXT_CLASS_HEADER, "value": LONG_CLASS}]}
    route_spec: dict[str, Any] = {}
    if spec.routing.gateway_parent_refs:
        route_spec["parentRefs"] = [
            {
                "group": "gateway.networking.k8s.io",
                "kind": "Gateway",
                **ref.model_dump(by_alias=True, exclude_none=True),
            }
            for ref in spec.routing.gateway_parent_refs
        ]
    return {
        "apiVersion": HTTPROUTE_API_VERSION,
        "kind": "HTTPRoute",
        "metadata": owner.metadata(http_route_name(owner.name), names.pool_labels(owner.name)),
        "spec": {
            **route_spec,
            "rules": [
                {"matches": [long_match], "backendRefs": _backends(owner, vendor_weights(spec, status, long=True))},
                {
                    "matches": [{"path": everything}],
                    "backendRefs": _backends(owner, vendor_weights(spec, status, long=False)),
                },
            ],
        },
    }
