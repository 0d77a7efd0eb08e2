"""Small constructors for Kubernetes JSON fragments (env vars, ports, probes, volumes, mounts).

Plain dicts in the API server's camelCase shape, so drivers stay pure and tests compare literals.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def env_value(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "value": value}


def env_field(name: str, field_path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}


def env_secret(name: str, secret: str, key: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def dedupe_env(env: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Later entries replace earlier ones of the same name, keeping the first position."""
    out: dict[str, dict[str, Any]] = {}
    for e in env:
        out[e["name"]] = e
    return list(out.values())


def container_port(name: str, port: int) -> dict[str, Any]:
    return {"name": name, "containerPort": port, "protocol": "TCP"}


def http_probe(path: str, port: int, *, period: int, failure_threshold: int, scheme: str = "HTTP") -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": port, "scheme": scheme},
        "periodSeconds": period,
        "failureThreshold": failure_threshold,
        "timeoutSeconds": 2,
    }


def tcp_probe(port: int, *, period: int, failure_threshold: int) -> dict[str, Any]:
    return {
        "tcpSocket": {"port": port},
        "periodSeconds": period,
        "failureThreshold": failure_threshold,
        "timeoutSeconds": 2,
    }


def empty_dir(name: str, medium: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"medium": medium} if medium else {}
    return {"name": name, "emptyDir": spec}


def host_path(name: str, path: str, kind: str) -> dict[str, Any]:
    return {"name": name, "hostPath": {"path": path, "type": kind}}


def configmap_volume(name: str, config_map: str) -> dict[str, Any]:
    return {"name": name, "configMap": {"name": config_map}}


def secret_volume(name: str, secret: str, mode: int = 0o400) -> dict[str, Any]:
    return {"name": name, "secret": {"secretName": secret, "defaultMode": mode}}


def mount(name: str, path: str, *, read_only: bool = False, sub_path: str | None = None) -> dict[str, Any]:
    m: dict[str, Any] = {"name": name, "mountPath": path}
    if sub_path is not None:
        m["subPath"] = sub_path
    if read_only:
        m["readOnly"] = True
    return m
