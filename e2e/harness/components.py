"""Command lines and health checks of the control-plane processes (all on 127.0.0.1).

Flags follow docs/e2e-harness.md. Endpoint/EndpointSlice controllers are off
because their validation rejects 127/8 pod IPs; the apiserver's endpoint reconciler is off for
the same reason (its own address is 127.0.0.1).
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from .config import RunPaths, binary
from .pki import Pki

SERVICE_CIDR = "10.0.0.0/24"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
KCM_CONTROLLERS = "*,-endpoints-controller,-endpointslice-controller,-endpointslice-mirroring-controller"


@dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    etcd_metrics: int
    apiserver: int
    controller_manager: int
    scheduler: int
    prometheus: int

    @property
    def api_url(self) -> str:
        return f"https://127.0.0.1:{self.apiserver}"


def etcd(paths: RunPaths, ports: Ports) -> list[str]:
    client = f"http://127.0.0.1:{ports.etcd_client}"
    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    return [
        str(binary("etcd")),
        "--name=e2e",
        f"--data-dir={paths.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=e2e={peer}",
        f"--listen-metrics-urls=http://127.0.0.1:{ports.etcd_metrics}",
        "--quota-backend-bytes=2147483648",
        "--auto-compaction-retention=1",
        "--unsafe-no-fsync=true",
        "--log-level=warn",
    ]


def apiserver(pki: Pki, ports: Ports, audit: tuple[Path, Path] | None = None) -> list[str]:
    """The apiserver's command line; `audit` = (policy file, log file) turns on its audit log."""
    audit_flags = [f"--audit-policy-file={audit[0]}", f"--audit-log-path={audit[1]}"] if audit else []
    return [
        str(binary("kube-apiserver")),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={ports.apiserver}",
        "--endpoint-reconciler-type=none",
        f"--tls-cert-file={pki.apiserver_cert}",
        f"--tls-private-key-file={pki.apiserver_key}",
        f"--client-ca-file={pki.ca_cert}",
        f"--service-account-issuer={SA_ISSUER}",
        f"--service-account-key-file={pki.sa_pub}",
        f"--service-account-signing-key-file={pki.sa_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        "--allow-privileged=true",
        "--profiling=false",
        *audit_flags,
    ]


def audit_policy(users: Sequence[str]) -> dict[str, Any]:
    """An audit policy recording every request of `users` at Metadata level (who, verb, object) and
    nothing else: an independent count of what one client sends, watches and Kopf's own calls included."""
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [{"level": "Metadata", "users": list(users)}, {"level": "None"}],
    }


def controller_manager(paths: RunPaths, pki: Pki, ports: Ports) -> list[str]:
    kubeconfig = paths.component_kubeconfig("kube-controller-manager")
    return [
        str(binary("kube-controller-manager")),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.controller_manager}",
        f"--cert-dir={paths.root / 'kcm-certs'}",
        "--leader-elect=false",
        "--use-service-account-credentials=true",
        f"--root-ca-file={pki.ca_cert}",
        f"--service-account-private-key-file={pki.sa_key}",
        f"--cluster-signing-cert-file={pki.ca_cert}",
        f"--cluster-signing-key-file={pki.ca_key}",
        f"--controllers={KCM_CONTROLLERS}",
        "--profiling=false",
    ]


def scheduler(paths: RunPaths, ports: Ports) -> list[str]:
    kubeconfig = paths.component_kubeconfig("kube-scheduler")
    return [
        str(binary("kube-scheduler")),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.scheduler}",
        f"--cert-dir={paths.root / 'scheduler-certs'}",
        "--leader-elect=false",
        "--profiling=false",
    ]


def kwok(paths: RunPaths) -> list[str]:
    # No --node-port: kwok then opens no listener at all.
    return [
        str(binary("kwok")),
        f"--kubeconfig={paths.component_kubeconfig('kwok')}",
        f"--config={paths.kwok / 'kwok.yaml'}",
        "--manage-all-nodes=false",
        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
        "--node-ip=127.0.0.1",
        "--node-lease-duration-seconds=40",
    ]


# --- health -----------------------------------------------------------------------------------


def etcd_healthy(ports: Ports) -> bool:
    r = httpx.get(f"http://127.0.0.1:{ports.etcd_client}/health", timeout=2)
    return r.status_code == 200 and r.json().get("health") == "true"


def apiserver_ready(ports: Ports, pki: Pki) -> bool:
    r = httpx.get(f"{ports.api_url}/readyz", verify=ssl.create_default_context(cafile=str(pki.ca_cert)), timeout=2)
    return r.status_code == 200 and r.text.strip() == "ok"


def component_healthy(port: int) -> bool:
    # KCM and the scheduler serve /healthz with a self-signed cert from their --cert-dir.
    r = httpx.get(f"https://127.0.0.1:{port}/healthz", verify=False, timeout=2)
    return r.status_code == 200 and r.text.strip() == "ok"


def prometheus_ready(port: int) -> bool:
    r = httpx.get(f"http://127.0.0.1:{port}/-/ready", timeout=2)
    return r.status_code == 200
