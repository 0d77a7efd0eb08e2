"""Fake accelerator node pools: kwok-managed Node objects with GPU/NPU allocatable.

Each node gets its own /24 pod CIDR inside the cluster's loopback slice 127.B.0.0/16
(127.B.0.0/24, 127.B.1.0/24, ...; see addresses.py), so kwok hands pods loopback IPs that local
processes can bind without any interface setup. Node InternalIPs are 127.B.255.x.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import addresses
from .config import KWOK_NODE_ANNOTATION

POOL_LABEL = "semipd.io/node-pool"
ACCELERATOR_LABEL = "semipd.io/accelerator"
MANAGED_LABEL = "semipd.io/e2e-node"


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str = "NoSchedule"

    def manifest(self) -> dict[str, str]:
        return {"key": self.key, "value": self.value, "effect": self.effect}


@dataclass(frozen=True)
class NodePool:
    """`count` identical nodes named `<name>-0` ... `<name>-<count-1>`."""

    name: str
    count: int
    accelerator: str
    resource: str
    devices_per_node: int
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    cpu: str = "96"
    memory: str = "1536Gi"
    pods: str = "110"

    def node_names(self) -> list[str]:
        return [f"{self.name}-{i}" for i in range(self.count)]


def gpu_pool(
    name: str = "gpu-h200",
    count: int = 4,
    *,
    product: str = "NVIDIA-H200",
    gpus: int = 8,
    memory_mib: int = 143771,
    taints: tuple[Taint, ...] = (),
) -> NodePool:
    """NVIDIA nodes labelled as GPU Feature Discovery would label them."""
    return NodePool(
        name=name,
        count=count,
        accelerator="nvidia",
        resource="nvidia.com/gpu",
        devices_per_node=gpus,
        labels={
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": product,
            "nvidia.com/gpu.count": str(gpus),
            "nvidia.com/gpu.memory": str(memory_mib),
        },
        taints=taints,
    )


def ascend_pool(
    name: str = "ascend-910b",
    count: int = 2,
    *,
    chip: str = "910B3",
    npus: int = 8,
    taints: tuple[Taint, ...] = (Taint("huawei.com/Ascend910", "present"),),
) -> NodePool:
    """Huawei Ascend nodes labelled as the MindCluster device plugin expects, tainted."""
    return NodePool(
        name=name,
        count=count,
        accelerator="ascend",
        resource="huawei.com/Ascend910",
        devices_per_node=npus,
        labels={
            "accelerator": "huawei-Ascend910",
            "accelerator-type": f"module-910b-{npus}",
            "node.kubernetes.io/npu.chip.name": chip,
        },
        taints=taints,
    )


def default_pools() -> list[NodePool]:
    return [gpu_pool(), ascend_pool()]


def allocate_cidrs(wanted: Sequence[str], taken: Mapping[str, str], octet: int) -> dict[str, str]:
    """Pod CIDR per node name: keep existing assignments, give new nodes the lowest /24 not in
    `taken` (which includes nodes about to be deleted: their pods may linger for a while)."""
    used = set(taken.values())
    free = (c for c in addresses.pod_cidrs(octet) if c not in used)
    result = {}
    for name in wanted:
        result[name] = taken[name] if name in taken else next(free)
    return result


def node_ip(cidr: str) -> str:
    """A node InternalIP derived from its pod CIDR: 127.B.N.0/24 -> 127.B.255.N+1 (unique)."""
    net = ipaddress.ip_network(cidr)
    _, octet, index, _ = net.network_address.packed
    return addresses.node_ip(octet, index)


def node_manifest(pool: NodePool, name: str, cidr: str) -> dict[str, Any]:
    resources = {
        "cpu": pool.cpu,
        "memory": pool.memory,
        "pods": pool.pods,
        "ephemeral-storage": "2Ti",
        pool.resource: str(pool.devices_per_node),
    }
    labels = {
        "type": "kwok",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        MANAGED_LABEL: "true",
        POOL_LABEL: pool.name,
        ACCELERATOR_LABEL: pool.accelerator,
        **pool.labels,
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {
            "podCIDR": cidr,
            "podCIDRs": [cidr],
            "providerID": f"kwok://{name}",
            "taints": [t.manifest() for t in pool.taints],
        },
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": node_ip(cidr)},
                {"type": "Hostname", "address": name},
            ],
            "allocatable": resources,
            "capacity": resources,
        },
    }


@dataclass(frozen=True)
class NodePlan:
    create: list[dict[str, Any]]
    delete: list[str]


def plan_nodes(pools: Iterable[NodePool], existing: Mapping[str, str], octet: int) -> NodePlan:
    """Nodes to create and delete so exactly the pools' nodes exist.

    `existing` maps the names of harness-managed nodes already present to their pod CIDRs.
    Existing nodes are kept as they are (their CIDR cannot change anyway).
    """
    pools = list(pools)
    wanted = [(p, n) for p in pools for n in p.node_names()]
    names = [n for _, n in wanted]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate node names in pools: {names}")
    cidrs = allocate_cidrs(names, existing, octet)
    create = [node_manifest(p, n, cidrs[n]) for p, n in wanted if n not in existing]
    delete = sorted(set(existing) - set(names))
    return NodePlan(create=create, delete=delete)
