"""Prometheus configured to discover pods through the local apiserver.

The binary is upstream Prometheus built from the Go module proxy by build-binaries.sh: Debian's
package (2.42) is compiled without Kubernetes service discovery.

Services get no endpoints on 127/8 pod IPs, so discovery is `kubernetes_sd_configs` role `pod`;
pods opt in with the usual annotations prometheus.io/scrape, prometheus.io/port and
prometheus.io/path, and are scraped at podIP:port.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from . import config as harness_config
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


def config(api_url: str, pki: Pki, self_port: int, scrape_interval: str = SCRAPE_INTERVAL) -> dict[str, Any]:
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
        # The operator rewrites this label on live pods when the KV-cache placement moves; as a
        # target label it would start new series mid-window and split every rate() in two.
        {"action": "labeldrop", "regex": "llm_d_ai_context_length_range"},
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
            # Prometheus itself: a series that always exists (e.g. to prove the TSDB survives a restart).
            {"job_name": "prometheus", "static_configs": [{"targets": [f"127.0.0.1:{self_port}"]}]},
            {
                "job_name": "kubernetes-pods",
                "kubernetes_sd_configs": [{"role": "pod", "api_server": api_url, "tls_config": tls}],
                "relabel_configs": relabel,
            },
        ],
    }


def binary() -> str:
    path = harness_config.binary("prometheus")
    if not path.exists():
        raise FileNotFoundError(f"{path} missing: run e2e/build-binaries.sh prometheus")
    return str(path)


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


def write_config(path: Path, api_url: str, pki: Pki, self_port: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config(api_url, pki, self_port), sort_keys=False))
