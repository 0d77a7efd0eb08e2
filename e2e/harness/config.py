"""Where the harness finds its binaries and keeps a cluster's files.

Every path is derived here so the CLI, the pytest fixture and the background kubelet agree.
Environment overrides: SEMIPD_RUN_DIR (run directory), SEMIPD_CACHE (binary cache).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "prometheus")
"""Go binaries every cluster needs; built by e2e/build-binaries.sh."""

LOCAL_EXEC_ANNOTATION = "semipd.io/local-exec"
"""Pods carrying this annotation set to "true" are run as local processes by the harness kubelet."""

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
RUN_MARKER_ENV = "SEMIPD_HARNESS_RUN"
"""Every process the harness starts carries this variable (value: the cluster's run id), so a
teardown can find stragglers that left their process group."""
POD_MARKER_ENV = "SEMIPD_POD_UID"
CONTAINER_MARKER_ENV = "SEMIPD_CONTAINER"
"""With POD_MARKER_ENV, identifies a container's processes (for the runtime-style kill of
everything a container's main process leaves behind)."""


def cache_dir() -> Path:
    return Path(os.environ.get("SEMIPD_CACHE", Path.home() / ".cache" / "semipd"))


def bin_dir() -> Path:
    return cache_dir() / "bin"


def binary(name: str) -> Path:
    return bin_dir() / name


def binary_version(name: str) -> str | None:
    stamp = bin_dir() / f".{name}.version"
    return stamp.read_text().strip() if stamp.exists() else None


def kwok_stage_dir() -> Path:
    """Upstream kwok Stage YAMLs, copied out of the Go module cache by build-binaries.sh."""
    version = binary_version("kwok") or "unknown"
    return cache_dir() / "kwok-stages" / version


def default_run_dir() -> Path:
    return Path(os.environ.get("SEMIPD_RUN_DIR", REPO_ROOT / ".run" / "cluster"))


@dataclass(frozen=True)
class RunPaths:
    """Layout of one cluster's run directory."""

    root: Path

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def audit_log(self) -> Path:
        return self.logs / "audit.log"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def kwok(self) -> Path:
        return self.root / "kwok"

    @property
    def prometheus(self) -> Path:
        return self.root / "prometheus"

    @property
    def pods(self) -> Path:
        return self.root / "pods"

    @property
    def kubeconfig(self) -> Path:
        """Admin (system:masters) kubeconfig: the one to hand to kubectl, tests and the operator."""
        return self.root / "kubeconfig"

    def component_kubeconfig(self, component: str) -> Path:
        return self.root / f"{component}.kubeconfig"

    def log(self, component: str) -> Path:
        return self.logs / f"{component}.log"

    @property
    def kubelet_ready(self) -> Path:
        return self.root / "kubelet.ready"
