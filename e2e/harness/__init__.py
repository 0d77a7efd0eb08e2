"""Local Kubernetes control plane for e2e tests and the demo (see docs/e2e-harness.md).

Real etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok on 127.0.0.1, fake
GPU/Ascend nodes with 127/8 pod CIDRs, a local kubelet for opted-in pods, and Prometheus.
"""

from .cluster import Cluster
from .config import LOCAL_EXEC_ANNOTATION
from .handle import ClusterError
from .nodes import NodePool, Taint, ascend_pool, default_pools, gpu_pool
from .processes import Timeout, wait_until

__all__ = [
    "LOCAL_EXEC_ANNOTATION",
    "Cluster",
    "ClusterError",
    "NodePool",
    "Taint",
    "Timeout",
    "ascend_pool",
    "default_pools",
    "gpu_pool",
    "wait_until",
]
