"""kwok configuration: upstream node/pod Stages plus one of ours for locally executed pods.

kwok v0.8.0 ships no built-in stages; build-binaries.sh copies the upstream Stage files out of
the Go module cache. Upstream pod stages would mark every pod Ready at once and delete it the
instant it is deleted; for pods that opt in to local execution the harness kubelet owns those
transitions instead, so the upstream pod stages exclude them and our stage only assigns the pod IP.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from .config import LOCAL_EXEC_ANNOTATION, kwok_stage_dir

UPSTREAM_STAGES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)

LOCAL_EXEC_SELECTOR = f'.metadata.annotations["{LOCAL_EXEC_ANNOTATION}"]'

# Our own stage: give a local-exec pod its IP (from the node's 127/8 pod CIDR) and nothing else;
# phase, conditions and container states are then reported by the harness kubelet.
ASSIGN_IP_STAGE: dict[str, Any] = {
    "apiVersion": "kwok.x-k8s.io/v1alpha1",
    "kind": "Stage",
    "metadata": {"name": "semipd-local-exec-assign-ip"},
    "spec": {
        "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
        "selector": {
            "matchExpressions": [
                {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                {"key": ".status.phase", "operator": "In", "values": ["Pending"]},
                {"key": ".status.podIP", "operator": "DoesNotExist"},
                {"key": LOCAL_EXEC_SELECTOR, "operator": "In", "values": ["true"]},
            ]
        },
        "next": {
            "statusTemplate": "\n".join(
                [
                    "{{ with NodeIPsWith .spec.nodeName }}",
                    "hostIP: {{ index . 0 | Quote }}",
                    "hostIPs:",
                    "{{ range . }}",
                    "- ip: {{ . | Quote }}",
                    "{{ end }}",
                    "{{ end }}",
                    '{{ with PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" )'
                    ' ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}',
                    "podIP: {{ index . 0 | Quote }}",
                    "podIPs:",
                    "{{ range . }}",
                    "- ip: {{ . | Quote }}",
                    "{{ end }}",
                    "{{ end }}",
                    "phase: Pending",
                ]
            )
        },
    },
}


def _exclude_local_exec(stage: dict[str, Any]) -> dict[str, Any]:
    stage = copy.deepcopy(stage)
    exprs = stage["spec"].setdefault("selector", {}).setdefault("matchExpressions", [])
    exprs.append({"key": LOCAL_EXEC_SELECTOR, "operator": "NotIn", "values": ["true"]})
    return stage


def stages(stage_dir: Path | None = None) -> list[dict[str, Any]]:
    base = stage_dir or kwok_stage_dir()
    out: list[dict[str, Any]] = []
    for rel in UPSTREAM_STAGES:
        path = base / rel
        if not path.exists():
            raise FileNotFoundError(f"kwok stage {path} missing: run e2e/build-binaries.sh kwok")
        stage = yaml.safe_load(path.read_text())
        out.append(_exclude_local_exec(stage) if rel.startswith("pod/") else stage)
    out.append(copy.deepcopy(ASSIGN_IP_STAGE))
    return out


def config_yaml(fallback_cidr: str, stage_dir: Path | None = None) -> str:
    """The multi-document file passed to `kwok --config`."""
    kwok_conf = {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        # Fallback pool for pods on nodes without a podCIDR (ours always have one).
        # kwok does not default these when a KwokConfiguration is passed ("parallelism must be > 0").
        "options": {
            "cidr": fallback_cidr,
            "nodeIP": "127.0.0.1",
            "nodeLeaseParallelism": 4,
            "podPlayStageParallelism": 4,
            "nodePlayStageParallelism": 4,
            "podsOnNodeSyncParallelism": 2,
        },
    }
    return yaml.safe_dump_all([kwok_conf, *stages(stage_dir)], sort_keys=False)
