"""Pure pod-spec interpretation for the harness kubelet: env, command, restarts, probes, status.

Everything here works on pods as plain JSON dicts (camelCase, as the apiserver sends them) and
does no I/O; lookups of Secrets/ConfigMaps are passed in as callables. Volumes and mounts are in
podvolumes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kubernetes.utils.quantity import parse_quantity

Pod = dict[str, Any]
Container = dict[str, Any]
SecretLookup = Callable[[str], Mapping[str, bytes] | None]
ConfigMapLookup = Callable[[str], Mapping[str, bytes] | None]
TokenMinter = Callable[[str | None, int], str]
"""(audience or None for the apiserver's, expirationSeconds) -> bearer token bound to the pod."""

SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


class PodConfigError(Exception):
    """The pod references something that does not exist or is unsupported (reported, retried)."""


# --- $(VAR) expansion, as the kubelet does for env values, command and args ------------------


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: known names are replaced, unknown ones are left as
    written, `$$` is an escaped `$`."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c != "$" or i + 1 == n:
            out.append(c)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(":
            close = text.find(")", i + 2)
            if close < 0:
                out.append(text[i:])
                break
            name = text[i + 2 : close]
            out.append(env[name] if name in env else text[i : close + 1])
            i = close + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


# --- downward API -----------------------------------------------------------------------------


def _subscript(path: str, prefix: str) -> str | None:
    """`metadata.labels['app']` -> `app` (None if `path` is not of that shape)."""
    if path.startswith(prefix + "[") and path.endswith("]"):
        key = path[len(prefix) + 1 : -1]
        if len(key) >= 2 and key[0] == key[-1] and key[0] in "'\"":
            return key[1:-1]
    return None


def _format_map(m: Mapping[str, str]) -> str:
    return "\n".join(f'{k}="{v}"' for k, v in sorted(m.items()))


def field_ref(pod: Pod, path: str) -> str:
    meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
    simple: dict[str, Any] = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.hostIP": status.get("hostIP"),
        "status.podIP": status.get("podIP"),
        "status.hostIPs": ",".join(x["ip"] for x in status.get("hostIPs") or []),
        "status.podIPs": ",".join(x["ip"] for x in status.get("podIPs") or []),
        "metadata.labels": _format_map(meta.get("labels") or {}),
        "metadata.annotations": _format_map(meta.get("annotations") or {}),
    }
    if path in simple:
        return str(simple[path] or "")
    for prefix in ("metadata.labels", "metadata.annotations"):
        key = _subscript(path, prefix)
        if key is not None:
            return str((meta.get(prefix.split(".")[1]) or {}).get(key, ""))
    raise PodConfigError(f"unsupported fieldRef {path!r}")


def resource_ref(pod: Pod, ref: Mapping[str, Any], default_container: str | None) -> str:
    """resourceFieldRef: the container's limit/request, divided by `divisor`, rounded up."""
    name = ref.get("containerName") or default_container
    containers = {c["name"]: c for c in pod.get("spec", {}).get("containers", [])}
    if name not in containers:
        raise PodConfigError(f"resourceFieldRef names unknown container {name!r}")
    kind, _, res = ref["resource"].partition(".")
    value = (containers[name].get("resources", {}).get(kind) or {}).get(res)
    if value is None:
        # The kubelet falls back to node allocatable; our nodes are fake, so say 0.
        return "0"
    divisor = parse_quantity(ref.get("divisor") or "1")
    return str(math.ceil(Decimal(parse_quantity(value)) / Decimal(divisor)))


# --- environment -------------------------------------------------------------------------------


def _lookup_key(kind: str, ref: Mapping[str, Any], lookup: Callable[[str], Mapping[str, bytes] | None]) -> str | None:
    data = lookup(ref["name"])
    optional = bool(ref.get("optional"))
    if data is None:
        if optional:
            return None
        raise PodConfigError(f"{kind} {ref['name']!r} not found")
    if ref["key"] not in data:
        if optional:
            return None
        raise PodConfigError(f"key {ref['key']!r} not in {kind} {ref['name']!r}")
    return data[ref["key"]].decode()


def resolve_env(
    pod: Pod,
    container: Container,
    *,
    base: Mapping[str, str],
    secrets: SecretLookup,
    configmaps: ConfigMapLookup,
) -> dict[str, str]:
    """The container's environment: `base` (image/runtime env), then envFrom, then env, with
    `$(VAR)` in values expanded against what is defined before them."""
    env = dict(base)
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for kind, lookup in (("configMapRef", configmaps), ("secretRef", secrets)):
            ref = source.get(kind)
            if ref is None:
                continue
            data = lookup(ref["name"])
            if data is None:
                if ref.get("optional"):
                    continue
                raise PodConfigError(f"{kind} {ref['name']!r} not found")
            for k, v in data.items():
                env[prefix + k] = v.decode()
    for var in container.get("env") or []:
        name = var["name"]
        if "valueFrom" not in var:
            env[name] = expand(var.get("value", ""), env)
            continue
        src = var["valueFrom"]
        value: str | None
        if "fieldRef" in src:
            value = field_ref(pod, src["fieldRef"]["fieldPath"])
        elif "resourceFieldRef" in src:
            value = resource_ref(pod, src["resourceFieldRef"], container["name"])
        elif "secretKeyRef" in src:
            value = _lookup_key("Secret", src["secretKeyRef"], secrets)
        elif "configMapKeyRef" in src:
            value = _lookup_key("ConfigMap", src["configMapKeyRef"], configmaps)
        else:
            raise PodConfigError(f"unsupported valueFrom for {name}: {sorted(src)}")
        if value is not None:
            env[name] = value
    return env


def command_line(container: Container, env: Mapping[str, str]) -> list[str]:
    """command + args with `$(VAR)` expanded. There is no image, so a command is required."""
    command = container.get("command") or []
    if not command:
        raise PodConfigError(
            f"container {container['name']!r} has no command: the local kubelet has no image entrypoint to fall back on"
        )
    return [expand(a, env) for a in [*command, *(container.get("args") or [])]]


# --- restarts ----------------------------------------------------------------------------------


def should_restart(policy: str, exit_code: int) -> bool:
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


def backoff_delay(restarts: int, *, base: float, cap: float) -> float:
    """Delay before restart number `restarts` (1-based): base, 2*base, 4*base, ... capped."""
    if restarts <= 0:
        return 0.0
    return float(min(cap, base * 2 ** (restarts - 1)))


def restart_policy(pod: Pod, container: Container, *, init: bool) -> str:
    """Per-container policy: sidecars (init containers with restartPolicy Always) always
    restart; other init containers follow the pod but never 'Always' (they must finish)."""
    own = container.get("restartPolicy")
    if own:
        return str(own)
    pod_policy = str(pod.get("spec", {}).get("restartPolicy") or "Always")
    if init and pod_policy == "Always":
        return "OnFailure"
    return pod_policy


def is_sidecar(container: Container) -> bool:
    return container.get("restartPolicy") == "Always"


# --- probes ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    kind: str  # httpGet | tcpSocket | exec
    host: str
    port: int
    path: str = "/"
    scheme: str = "HTTP"
    command: tuple[str, ...] = ()
    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3
    headers: tuple[tuple[str, str], ...] = field(default=())


def _port(container: Container, port: int | str) -> int:
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    raise PodConfigError(f"probe port {port!r} is not a named port of {container['name']!r}")


def probe(container: Container, which: str, pod_ip: str) -> Probe | None:
    """Parse readinessProbe / livenessProbe / startupProbe (None if absent)."""
    spec = container.get(which)
    if not spec:
        return None
    timing = {
        "initial_delay": float(spec.get("initialDelaySeconds", 0)),
        "period": float(spec.get("periodSeconds", 10)),
        "timeout": float(spec.get("timeoutSeconds", 1)),
        "success_threshold": int(spec.get("successThreshold", 1)),
        "failure_threshold": int(spec.get("failureThreshold", 3)),
    }
    if "httpGet" in spec:
        h = spec["httpGet"]
        headers = tuple((x["name"], x["value"]) for x in h.get("httpHeaders") or [])
        return Probe(
            "httpGet",
            h.get("host") or pod_ip,
            _port(container, h["port"]),
            h.get("path", "/"),
            h.get("scheme", "HTTP"),
            headers=headers,
            **timing,
        )
    if "tcpSocket" in spec:
        t = spec["tcpSocket"]
        return Probe("tcpSocket", t.get("host") or pod_ip, _port(container, t["port"]), **timing)
    if "exec" in spec:
        return Probe("exec", pod_ip, 0, command=tuple(spec["exec"].get("command") or ()), **timing)
    raise PodConfigError(f"unsupported {which} handler {sorted(spec)}")


# --- status ------------------------------------------------------------------------------------


@dataclass
class ContainerState:
    """What the kubelet knows about one container, rendered into containerStatuses."""

    name: str
    image: str
    state: dict[str, Any] = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: dict[str, Any] = field(default_factory=dict)
    restart_count: int = 0
    ready: bool = False
    started: bool = False

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "image": self.image,
            "imageID": "",
            "containerID": "",
            "state": self.state,
            "lastState": self.last_state,
            "restartCount": self.restart_count,
            "ready": self.ready,
            "started": self.started,
        }

    @property
    def running(self) -> bool:
        return "running" in self.state

    @property
    def exit_code(self) -> int | None:
        term = self.state.get("terminated")
        return None if term is None else int(term["exitCode"])


def pod_phase(policy: str, mains: list[ContainerState], *, initialized: bool, failed_init: bool) -> str:
    """Pod phase from container states (Never/OnFailure pods can finish; Always pods cannot)."""
    if failed_init:
        return "Failed"
    if not initialized:
        return "Pending"
    codes = [c.exit_code for c in mains]
    if any(c.running for c in mains) or any(code is None for code in codes):
        return "Running"
    if policy == "Always":
        return "Running"
    if all(code == 0 for code in codes):
        return "Succeeded"
    if policy == "Never":
        return "Failed"
    return "Running"  # OnFailure: failed containers are being restarted


def conditions(now: str, *, initialized: bool, ready: bool, previous: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pod conditions, keeping lastTransitionTime of conditions whose status did not change."""
    before = {c["type"]: c for c in previous}
    wanted = {
        "PodScheduled": True,
        "Initialized": initialized,
        "ContainersReady": ready,
        "Ready": ready,
    }
    out = []
    for ctype, ok in wanted.items():
        status = "True" if ok else "False"
        old = before.get(ctype)
        since = old["lastTransitionTime"] if old and old.get("status") == status else now
        cond: dict[str, Any] = {"type": ctype, "status": status, "lastTransitionTime": since, "lastProbeTime": None}
        if not ok and ctype in ("ContainersReady", "Ready"):
            cond["reason"] = "ContainersNotReady"
        if not ok and ctype == "Initialized":
            cond["reason"] = "ContainersNotInitialized"
        out.append(cond)
    return out
