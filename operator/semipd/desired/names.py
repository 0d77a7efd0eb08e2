"""Names and labels of everything an InferencePool owns, in one place.

Selectors use only stable, revision-free labels so a spec change never orphans pods; the
`llm-d.ai/role: prefill-decode` label makes stock routers treat semi-PD pods as aggregated servers.
"""

from __future__ import annotations

from semipd.api.v1alpha1 import GROUP, Accelerator, NodePool

POOL_LABEL = f"{GROUP}/pool"
NODE_POOL_LABEL = f"{GROUP}/node-pool"
ACCELERATOR_LABEL = f"{GROUP}/accelerator"
ROLE_LABEL = "llm-d.ai/role"
ROLE_PREFILL_DECODE = "prefill-decode"
MANAGED_BY = "semipd-operator"
AGENT_METRICS_PORT_ANNOTATION = f"{GROUP}/agent-metrics-port"
TOKEN_HASH_ANNOTATION = f"{GROUP}/token-hash"


def workload_name(pool: str, node_pool: str) -> str:
    """Deployment (and PDB) of one node pool."""
    return f"{pool}-{node_pool}"


def service_name(pool: str) -> str:
    """Headless Service over all of a pool's engine pods."""
    return f"{pool}-engines"


def token_secret_name(pool: str) -> str:
    """Secret holding the agents' admin bearer token."""
    return f"{pool}-agent-token"


def gie_pool_name(pool: str, accelerator: Accelerator) -> str:
    """Gateway API Inference Extension InferencePool of one vendor domain."""
    return f"{pool}-{accelerator.value}"


def pool_labels(pool: str) -> dict[str, str]:
    """Labels on every object owned by the InferencePool `pool`."""
    return {
        "app.kubernetes.io/name": "semipd-engine",
        "app.kubernetes.io/instance": pool,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        POOL_LABEL: pool,
    }


def node_pool_selector(pool: str, node_pool: NodePool) -> dict[str, str]:
    """The immutable Deployment selector of one node pool's pods."""
    return {POOL_LABEL: pool, NODE_POOL_LABEL: node_pool.name}


def pod_labels(pool: str, node_pool: NodePool) -> dict[str, str]:
    """Labels of one node pool's pods (selector labels plus router-facing ones)."""
    return {
        **pool_labels(pool),
        **node_pool_selector(pool, node_pool),
        "app.kubernetes.io/component": "engine",
        ACCELERATOR_LABEL: node_pool.accelerator.value,
        ROLE_LABEL: ROLE_PREFILL_DECODE,
    }
