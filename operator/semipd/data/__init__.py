"""Data shipped with the package: the public serving traces, the upstream GIE CRD, a default pool.

Read through importlib.resources so a wheel install and a clone behave the same. Licences and
attribution: data/traces/README.md (Azure LLM 2023: CC-BY-4.0, Patel et al., "Splitwise", ISCA 2024;
Mooncake: Apache-2.0) and data/crds/README.md (Gateway API Inference Extension, Apache-2.0).
"""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable

GIE_CRD_FILE = "inference.networking.k8s.io_inferencepools.yaml"


def upstream_gie_crd() -> Traversable:
    """The Gateway API Inference Extension v1 InferencePool CRD (upstream, unmodified)."""
    return resources.files(__name__) / "crds" / GIE_CRD_FILE


DEFAULT_POOL_FILE = "sim-mixed-gpu-ascend.yaml"


def default_pool() -> Traversable:
    """The InferencePool `semipd simulate` uses without `--pool` (a copy of examples/sim-mixed-gpu-ascend.yaml)."""
    return resources.files(__name__) / "pools" / DEFAULT_POOL_FILE
