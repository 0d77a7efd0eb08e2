"""Pure volume and mount interpretation for the harness kubelet: what each volume holds.

Works on pods as plain JSON dicts and does no I/O; Secret/ConfigMap lookups and token minting
are passed in as callables (see podspec for env, restarts, probes and status).
"""

from __future__ import annotations

import base64
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .podspec import (
    ConfigMapLookup,
    Container,
    Pod,
    PodConfigError,
    SecretLookup,
    TokenMinter,
    expand,
    field_ref,
    resource_ref,
)

# --- volumes -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class VolumeFile:
    path: str
    data: bytes
    mode: int


@dataclass(frozen=True)
class VolumeContent:
    """What to materialise for one volume. `files` is None for plain directories (emptyDir);
    `host_path` is set for hostPath volumes (bound directly)."""

    files: list[VolumeFile] | None = None
    host_path: str | None = None
    memory: bool = False
    refresh: bool = False
    """True if the contents change over time (projected tokens) and must be rewritten."""


def _safe_relpath(path: str) -> str:
    norm = posixpath.normpath(path)
    if norm.startswith(("/", "..")) or norm == ".":
        raise PodConfigError(f"volume item path {path!r} escapes the volume")
    return norm


def _key_files(
    data: Mapping[str, bytes] | None, spec: Mapping[str, Any], kind: str, default_mode: int
) -> list[VolumeFile]:
    if data is None:
        if spec.get("optional"):
            return []
        raise PodConfigError(f"{kind} {spec.get('name') or spec.get('secretName')!r} not found")
    items = spec.get("items")
    if not items:
        return [VolumeFile(_safe_relpath(k), v, default_mode) for k, v in sorted(data.items())]
    files = []
    for item in items:
        if item["key"] not in data:
            if spec.get("optional"):
                continue
            raise PodConfigError(f"key {item['key']!r} not in {kind}")
        files.append(VolumeFile(_safe_relpath(item["path"]), data[item["key"]], item.get("mode", default_mode)))
    return files


def _downward_files(pod: Pod, items: list[Mapping[str, Any]], default_mode: int) -> list[VolumeFile]:
    files = []
    for item in items:
        if "fieldRef" in item:
            value = field_ref(pod, item["fieldRef"]["fieldPath"])
        elif "resourceFieldRef" in item:
            value = resource_ref(pod, item["resourceFieldRef"], None)
        else:
            raise PodConfigError(f"unsupported downwardAPI item {sorted(item)}")
        files.append(VolumeFile(_safe_relpath(item["path"]), value.encode(), item.get("mode", default_mode)))
    return files


def volume_content(
    pod: Pod,
    volume: Mapping[str, Any],
    *,
    secrets: SecretLookup,
    configmaps: ConfigMapLookup,
    mint_token: TokenMinter,
) -> VolumeContent:
    if "emptyDir" in volume:
        return VolumeContent(memory=(volume["emptyDir"] or {}).get("medium") == "Memory")
    if "hostPath" in volume:
        return VolumeContent(host_path=volume["hostPath"]["path"])
    if "secret" in volume:
        spec = volume["secret"]
        return VolumeContent(
            files=_key_files(secrets(spec["secretName"]), spec, "Secret", spec.get("defaultMode", 0o644))
        )
    if "configMap" in volume:
        spec = volume["configMap"]
        return VolumeContent(
            files=_key_files(configmaps(spec["name"]), spec, "ConfigMap", spec.get("defaultMode", 0o644))
        )
    if "downwardAPI" in volume:
        spec = volume["downwardAPI"]
        return VolumeContent(files=_downward_files(pod, spec.get("items") or [], spec.get("defaultMode", 0o644)))
    if "projected" in volume:
        spec = volume["projected"]
        mode = spec.get("defaultMode", 0o644)
        files: list[VolumeFile] = []
        refresh = False
        for src in spec.get("sources") or []:
            if "serviceAccountToken" in src:
                tok = src["serviceAccountToken"]
                token = mint_token(tok.get("audience"), int(tok.get("expirationSeconds", 3600)))
                files.append(VolumeFile(_safe_relpath(tok["path"]), token.encode(), mode))
                refresh = True
            elif "configMap" in src:
                files += _key_files(configmaps(src["configMap"]["name"]), src["configMap"], "ConfigMap", mode)
            elif "secret" in src:
                files += _key_files(secrets(src["secret"]["name"]), src["secret"], "Secret", mode)
            elif "downwardAPI" in src:
                files += _downward_files(pod, src["downwardAPI"].get("items") or [], mode)
            else:
                raise PodConfigError(f"unsupported projected source {sorted(src)}")
        return VolumeContent(files=files, refresh=refresh)
    raise PodConfigError(f"unsupported volume type in {sorted(k for k in volume if k != 'name')}")


def decode_secret(data: Mapping[str, str] | None) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in (data or {}).items()}


def encode_configmap(data: Mapping[str, str] | None, binary: Mapping[str, str] | None) -> dict[str, bytes]:
    out = {k: v.encode() for k, v in (data or {}).items()}
    out.update(decode_secret(binary))
    return out


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool = False


def mounts(container: Container, volume_dirs: Mapping[str, str], env: Mapping[str, str]) -> list[Mount]:
    """Bind mounts for a container's volumeMounts, shallowest target first (so nested mounts
    land on top of their parents)."""
    result = []
    for vm in container.get("volumeMounts") or []:
        if vm["name"] not in volume_dirs:
            raise PodConfigError(f"volumeMount {vm['name']!r} names no volume of the pod")
        sub = vm.get("subPath") or (expand(vm["subPathExpr"], env) if vm.get("subPathExpr") else "")
        source = volume_dirs[vm["name"]]
        if sub:
            source = posixpath.join(source, _safe_relpath(sub))
        target = posixpath.normpath(vm["mountPath"])
        if not target.startswith("/"):
            raise PodConfigError(f"mountPath {vm['mountPath']!r} is not absolute")
        result.append(Mount(source, target, bool(vm.get("readOnly"))))
    return sorted(result, key=lambda m: m.target.count("/"))
