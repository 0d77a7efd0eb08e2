"""Prometheus (Debian's package) configured to discover pods through the local apiserver.

Services get no endpoints on 127/8 pod IPs, so discovery is `kubernetes_sd_configs` role `pod`;
pods opt in with the usual annotations prometheus.io/scrape, prometheus.io/port and
prometheus.io/path, and are scraped at podIP:port.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from .pki import Pki

SCRAPE_INTERVAL = "2s"

# The RBAC Prometheus's identity gets: pod discovery only.
CLUSTER_ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": "semipd-e2e-prometheus"},
    "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
}
CLUSTER_ROLE_BINDING = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRoleBinding",
    "metadata": {"name": "semipd-e2e-prometheus"},
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "semipd-e2e-prometheus"},
    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "semipd-e2e-prometheus"}],
}


def _annotation(name: str) -> str:
    return "__meta_kubernetes_pod_annotation_" + "".join(c if c.isalnum() else "_" for c in name)


def config(api_url: str, pki: Pki, scrape_interval: str = SCRAPE_INTERVAL) -> dict[str, Any]:
    tls = {
        "ca_file": str(pki.ca_cert),
        "cert_file": str(pki.client_cert("prometheus")),
        "key_file": str(pki.client_key("prometheus")),
    }
    relabel = [
        {"source_labels": [_annotation("prometheus.io/scrape")], "action": "keep", "regex": "true"},
        {"source_labels": ["__meta_kubernetes_pod_phase"], "action": "drop", "regex": "Pending|Succeeded|Failed"},
        {"source_labels": ["__meta_kubernetes_pod_ip"], "action": "drop", "regex": ""},
        {
            "source_labels": [_annotation("prometheus.io/scheme")],
            "action": "replace",
            "regex": "(https?)",
            "target_label": "__scheme__",
        },
        {
            "source_labels": [_annotation("prometheus.io/path")],
            "action": "replace",
            "regex": "(.+)",
            "target_label": "__metrics_path__",
        },
        {
            "source_labels": ["__meta_kubernetes_pod_ip", _annotation("prometheus.io/port")],
            "action": "replace",
            "regex": r"([^;]+);(\d+)",
            "replacement": "$1:$2",
            "target_label": "__address__",
        },
        {"action": "labelmap", "regex": "__meta_kubernetes_pod_label_(.+)"},
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
    ]
    return {
        "global": {
            "scrape_interval": scrape_interval,
            "scrape_timeout": scrape_interval,
            "evaluation_interval": scrape_interval,
        },
        "scrape_configs": [
            {
                "job_name": "kubernetes-pods",
                "kubernetes_sd_configs": [{"role": "pod", "api_server": api_url, "tls_config": tls}],
                "relabel_configs": relabel,
            }
        ],
    }


def binary() -> str:
    path = shutil.which("prometheus")
    if not path:
        raise FileNotFoundError("prometheus not installed: run e2e/install-deps.sh")
    return path


def argv(config_file: Path, data_dir: Path, port: int) -> list[str]:
    return [
        binary(),
        f"--config.file={config_file}",
        f"--storage.tsdb.path={data_dir}",
        "--storage.tsdb.retention.time=1d",
        f"--web.listen-address=127.0.0.1:{port}",
        "--web.enable-lifecycle",
        "--log.level=warn",
    ]


def write_config(path: Path, api_url: str, pki: Pki) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config(api_url, pki), sort_keys=False))
