"""Chaos on the real control plane: a node under a running pool stops reporting.

The node's heartbeat stops: the test takes over its Lease in kube-node-lease (another holder, a
long duration), and kwok, which renews only leases it holds and leaves a node it does not hold
alone, stops reporting for it, just as a kubelet on a dead machine would. The real
kube-controller-manager marks the node NotReady after its node-monitor grace period and taints it
`unreachable:NoExecute`; the pool's engine pods tolerate that for 5 s (a node-pool toleration, as a
production pool would set to fail over faster than Kubernetes' default 300 s), are evicted, and the
Deployment's replacements land on another node of the same node pool. Afterwards the pool's objects
are exactly the expected set and it has exactly its replicas, none on the dead node. Deleting the
Lease afterwards hands the node back to kwok, which re-initializes it to Ready. Figures go to
`<run dir>/chaos-figures.json`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client

from e2e.chaos import ChaosPool, chaos_operator, record
from e2e.harness import wait_until
from e2e.harness.nodes import POOL_LABEL
from e2e.operator_process import OperatorProcess

pytestmark = pytest.mark.e2e

REPLICAS = 2
TOLERATION_S = 5
FAIL_OVER_BOUND_S = 240  # the controller manager's grace period (50 s) + the toleration + a pod start, loaded
NOT_READY_BOUND_S = 180  # the 50 s grace period, plus one more if kwok's 10-minute status heartbeat lands inside it
NODE_LEASE_NAMESPACE = "kube-node-lease"
CHAOS_HOLDER = "semipd-chaos-e2e"


@pytest.fixture(scope="module")
def pool(cluster: Any) -> ChaosPool:
    return ChaosPool(cluster, "chaos-nodes-e2e", "nodes")


@pytest.fixture(scope="module")
def operator(cluster: Any, pool: ChaosPool, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    with chaos_operator(cluster, pool.ns, tmp_path_factory.mktemp("chaos-nodes-operator")) as op:
        yield op


def tolerating_manifest(pool: ChaosPool) -> dict[str, Any]:
    doc = pool.manifest(REPLICAS)
    doc["spec"]["nodePools"][0]["tolerations"] = [
        {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": TOLERATION_S}
        for key in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
    ]
    return doc


def node_ready(cluster: Any, name: str) -> str:
    node = cluster.core().read_node(name)
    return next((c.status for c in node.status.conditions or [] if c.type == "Ready"), "Unknown")


def stop_heartbeats(cluster: Any, node: str) -> None:
    """Hold the node's Lease as someone else, so kwok neither renews it nor updates the node."""
    leases = client.CoordinationV1Api(cluster.api())
    for _ in range(5):  # kwok renews every ~10 s; a renewal between our read and write is a 409
        lease = leases.read_namespaced_lease(node, NODE_LEASE_NAMESPACE)
        lease.spec.holder_identity = CHAOS_HOLDER
        lease.spec.lease_duration_seconds = 3600  # renewTime stays put: no fresh heartbeat for the node monitor
        try:
            leases.replace_namespaced_lease(node, NODE_LEASE_NAMESPACE, lease)
            return
        except client.ApiException as exc:
            if exc.status != 409:
                raise
    raise AssertionError(f"could not take over the Lease of {node}: five conflicts in a row")


def resume_heartbeats(cluster: Any, node: str) -> None:
    client.CoordinationV1Api(cluster.api()).delete_namespaced_lease(node, NODE_LEASE_NAMESPACE)


def test_a_node_going_not_ready_moves_its_engines_to_another_node_of_the_pool(
    cluster: Any, pool: ChaosPool, operator: OperatorProcess
) -> None:
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(tolerating_manifest(pool)))
    pool.wait_replicas(REPLICAS, timeout=180)
    victim_pod = pool.pods()[0]
    node = victim_pod["spec"]["nodeName"]
    node_pool = cluster.core().read_node(node).metadata.labels[POOL_LABEL]
    on_node = {p["metadata"]["name"] for p in pool.pods() if p["spec"]["nodeName"] == node}
    t0 = time.monotonic()
    stop_heartbeats(cluster, node)
    try:
        wait_until(lambda: node_ready(cluster, node) != "True", timeout=NOT_READY_BOUND_S, interval=1,
                   what=f"{node} NotReady")  # fmt: skip
        not_ready_after = time.monotonic() - t0
        wait_until(lambda: not on_node & {p["metadata"]["name"] for p in pool.pods()}, timeout=120, interval=1,
                   what=f"the pods on {node} evicted")  # fmt: skip
        evicted_after = time.monotonic() - t0

        def replaced() -> bool:
            pods = pool.pods()
            ready = [p for p in pods if any(c["type"] == "Ready" and c["status"] == "True"
                                            for c in (p.get("status") or {}).get("conditions", []))]  # fmt: skip
            return len(pods) == REPLICAS and len(ready) == REPLICAS

        wait_until(replaced, timeout=FAIL_OVER_BOUND_S, interval=1, what=f"{REPLICAS} Ready engines again")
        replaced_after = time.monotonic() - t0
        pods = pool.pods()
        assert all(p["spec"]["nodeName"] != node for p in pods)
        assert {cluster.core().read_node(p["spec"]["nodeName"]).metadata.labels[POOL_LABEL] for p in pods} == {
            node_pool
        }
        assert pool.owned() == pool.expected()  # nothing duplicated or orphaned
        assert pool.deployment()["spec"]["replicas"] == REPLICAS
    finally:
        resume_heartbeats(cluster, node)
        cluster.wait_nodes_ready([node], timeout=120)
        wait_until(lambda: not [t for t in cluster.core().read_node(node).spec.taints or []
                                if t.key.startswith("node.kubernetes.io/")],
                   timeout=120, interval=1, what=f"{node}'s unreachable taints lifted")  # fmt: skip
    record(cluster, "node_not_ready", {
        "node_not_ready_after_s": not_ready_after,
        "pods_evicted_after_s": evicted_after,
        "replacements_ready_after_s": replaced_after,
        "duplicated_or_orphaned_objects": float(len(pool.owned()) - len(pool.expected())),
    })  # fmt: skip
