"""Everything one InferencePool owns, built from its spec: the desired state in one list."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from semipd.api.v1alpha1 import InferencePoolSpec, KVCachePlacementStatus
from semipd.desired import children, routing
from semipd.desired.owner import Owner
from semipd.desired.workload import WorkloadSettings, token_hash, workload
from semipd.engines import EngineContext, get_driver


def desired_children(
    owner: Owner,
    spec: InferencePoolSpec,
    *,
    token: str,
    replicas: Mapping[str, int | None],
    settings: WorkloadSettings,
    gie_installed: bool,
    httproute_installed: bool = False,
    kv_cache: KVCachePlacementStatus | None = None,
) -> list[dict[str, Any]]:
    """The Secret, Service, per node pool Deployment + PDB, and GIE pools (when their CRD exists),
    with an HTTPRoute weighting them by the KV-cache placement `kv_cache` (when Gateway API's exists)."""
    out = [children.agent_token_secret(owner, token), children.headless_service(owner, spec)]
    digest = token_hash(token)
    for np in spec.node_pools:
        ctx = EngineContext(spec, np)
        driver = get_driver(ctx.engine.kind)
        out.append(workload(owner, ctx, driver, replicas=replicas[np.name], token_digest=digest, settings=settings))
        out.append(children.disruption_budget(owner, np))
    if gie_installed and spec.routing.gateway_inference_pools:
        out += children.gie_inference_pools(owner, spec)
        if httproute_installed:
            out.append(routing.http_route(owner, spec, kv_cache))
    return out
