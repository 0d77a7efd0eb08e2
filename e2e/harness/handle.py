"""A handle on one run directory's cluster: its recorded state, clients and observations.

ClusterHandle reads `<run dir>/state.json` (pids, ports, address slice), says whether the
recorded processes are alive, hands out API clients and kubectl, and offers the read-side helpers
tests use (wait for pods, events, container logs, Prometheus queries). Starting and stopping
the cluster is Cluster's job (cluster.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client

from . import components, kube, pki, processes
from .config import RUN_MARKER_ENV, RunPaths, binary, default_run_dir
from .processes import Fatal, wait_until

CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
BACKGROUND = (*CONTROL_PLANE, "kubelet", "prometheus")


def log(msg: str) -> None:
    print(f"[harness {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class KubectlError(subprocess.CalledProcessError):
    """A failed kubectl call whose message carries kubectl's stderr (the apiserver's reason)."""

    def __str__(self) -> str:
        return f"{super().__str__()}\nstderr: {(self.stderr or '').strip()[-2000:]}"


class ClusterError(Fatal):
    pass


class ClusterHandle:
    """A handle on one run directory's cluster (running or not): state, clients, observations."""

    def __init__(self, run_dir: Path | None = None) -> None:
        self.paths = RunPaths(Path(run_dir) if run_dir else default_run_dir())
        self.state: dict[str, Any] = self._load_state()
        self._api: client.ApiClient | None = None
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._dynamic: Any = None

    # --- state -------------------------------------------------------------------------------

    def _load_state(self) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(self.paths.state.read_text())
            return data
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def _save_state(self) -> None:
        tmp = self.paths.state.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state, indent=2, sort_keys=True))
        tmp.replace(self.paths.state)

    @property
    def run_id(self) -> str:
        return str(self.state["run_id"])

    @property
    def address_octet(self) -> int:
        """B of this cluster's loopback slice 127.B.0.0/16 (pod IPs, node IPs)."""
        return int(self.state["address_octet"])

    @property
    def ports(self) -> components.Ports:
        return components.Ports(**self.state["ports"])

    @property
    def pki(self) -> pki.Pki:
        return pki.Pki(self.paths.pki)

    @property
    def kubeconfig(self) -> Path:
        return self.paths.kubeconfig

    @property
    def api_url(self) -> str:
        return self.ports.api_url

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.prometheus}"

    @property
    def ca_file(self) -> Path:
        return self.pki.ca_cert

    def pid(self, component: str) -> int | None:
        entry = self.state.get("processes", {}).get(component)
        return int(entry["pid"]) if entry else None

    def process_alive(self, component: str) -> bool:
        child = self._children.get(component)
        if child is not None and child.pid == self.pid(component):
            # Started by us: poll() also reaps it. (Right after fork /proc/<pid>/environ still
            # shows our environment, so the marker check below would race.)
            return child.poll() is None
        pid = self.pid(component)
        return bool(pid and processes.alive(pid) and processes.has_marker(pid, RUN_MARKER_ENV, self.run_id))

    def is_running(self) -> bool:
        """Every background process alive (Prometheus may be deliberately stopped) and the
        apiserver ready."""
        if not self.state.get("ready") or "address_octet" not in self.state:
            return False  # (a state without an address slice predates slices: start afresh)
        needed = [c for c in BACKGROUND if c != "prometheus" or not self.state.get("prometheus_stopped")]
        if not all(self.process_alive(c) for c in needed):
            return False
        try:
            return components.apiserver_ready(self.ports, self.pki)
        except httpx.HTTPError:
            return False

    # --- clients -----------------------------------------------------------------------------

    def api(self) -> client.ApiClient:
        if self._api is None:
            self._api = kube.api_client(self.kubeconfig)
        return self._api

    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api())

    def apps(self) -> client.AppsV1Api:
        return client.AppsV1Api(self.api())

    def dynamic(self) -> Any:
        if self._dynamic is None:
            self._dynamic = kube.dynamic_client(self.kubeconfig)
        return self._dynamic

    def apply(self, *objs: dict[str, Any]) -> list[Any]:
        """Server-side apply dict manifests (namespaced ones carry metadata.namespace)."""
        return kube.apply_all(self.dynamic(), objs)

    def kubectl(
        self, *args: str, check: bool = True, timeout: float = 60, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run the real kubectl (from the binary cache) against this cluster."""
        done = subprocess.run(
            [str(binary("kubectl")), f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
        )
        if check and done.returncode != 0:
            raise KubectlError(done.returncode, done.args, done.stdout, done.stderr)
        return done

    def wait_crd_established(self, name: str, timeout: float = 60) -> None:
        """Wait until CRD `name` is Established. Polled here, not with `kubectl wait`: a CRD created
        a moment ago has no status.conditions yet, and kubectl wait then fails at once (".status.conditions
        accessor error: <nil>", seen in CI on a cold control plane)."""

        def established() -> bool:
            doc = json.loads(self.kubectl("get", f"crd/{name}", "-o", "json").stdout)
            return bool(kube.condition(doc, "Established").get("status") == "True")

        wait_until(established, timeout=timeout, interval=0.5, what=f"CRD {name} Established")

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.paths.log(name)
        if not path.exists():
            return "(no log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def prometheus_query(self, promql: str) -> list[dict[str, Any]]:
        """Instant query; returns the result vector (raises on API errors)."""
        r = httpx.get(f"{self.prometheus_url}/api/v1/query", params={"query": promql}, timeout=5)
        r.raise_for_status()
        body = r.json()
        if body.get("status") != "success":
            raise ClusterError(f"prometheus query {promql!r} failed: {body}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def prometheus_targets(self) -> list[dict[str, Any]]:
        r = httpx.get(f"{self.prometheus_url}/api/v1/targets", params={"state": "active"}, timeout=5)
        r.raise_for_status()
        targets: list[dict[str, Any]] = r.json()["data"]["activeTargets"]
        return targets

    # --- namespaces --------------------------------------------------------------------------

    def ensure_namespace(self, name: str, *, timeout: float = 120) -> None:
        """Create `name` if it is missing, then wait until pods can be admitted there: the controller
        manager has made the `default` ServiceAccount and published `kube-root-ca.crt` (token volumes).
        A cold cluster's first namespace, and one made soon after the controller manager restarted
        (the control-plane chaos tests), waits for its informers to sync: at 30 s a CI run's chaos-nodes
        fixture, right after those tests, timed out."""
        self.kubectl("create", "namespace", name, check=False)
        core = self.core()
        wait_until(
            lambda: (
                core.read_namespaced_service_account("default", name)
                and core.read_namespaced_config_map("kube-root-ca.crt", name)
            ),
            timeout=timeout,
            what=f"ServiceAccount default and ConfigMap kube-root-ca.crt in {name}",
        )

    # --- pods --------------------------------------------------------------------------------

    def wait_pods(
        self, namespace: str, label_selector: str, count: int, *, ready: bool = True, timeout: float = 60
    ) -> list[Any]:
        """Wait until exactly `count` non-terminating pods match and all are Running (and Ready,
        unless `ready=False`); returns them (V1Pod objects)."""

        def probe() -> list[Any] | None:
            pods = [
                p
                for p in self.core().list_namespaced_pod(namespace, label_selector=label_selector).items
                if p.metadata.deletion_timestamp is None
            ]
            if len(pods) != count or any(p.status.phase != "Running" for p in pods):
                return None
            if ready:
                for p in pods:
                    conds = {c.type: c.status for c in (p.status.conditions or [])}
                    if conds.get("Ready") != "True":
                        return None
            return pods or None

        def describe() -> str:
            pods = self.core().list_namespaced_pod(namespace, label_selector=label_selector).items
            return (
                "\n".join(
                    f"  {p.metadata.name} node={p.spec.node_name} phase={p.status.phase} "
                    f"ip={p.status.pod_ip} deleting={p.metadata.deletion_timestamp is not None}"
                    for p in pods
                )
                or "  (no pods)"
            )

        result: list[Any] = wait_until(
            probe, timeout=timeout, what=f"{count} pods {label_selector} in {namespace}", on_timeout=describe
        )
        return result

    def wait_gone(self, namespace: str, label_selector: str, *, timeout: float = 60) -> None:
        wait_until(
            lambda: not self.core().list_namespaced_pod(namespace, label_selector=label_selector).items,
            timeout=timeout,
            what=f"pods {label_selector} in {namespace} to be deleted",
        )

    def events(self, namespace: str, involved_name: str) -> list[Any]:
        selector = f"involvedObject.name={involved_name}"
        items = self.core().list_namespaced_event(namespace, field_selector=selector).items
        return list(items)

    def pod_dir(self, namespace: str, name: str) -> Path | None:
        """The harness kubelet's directory for the newest pod of that name (None if none)."""
        base = self.paths.pods / namespace
        found = sorted(base.glob(f"{name}-*"), key=lambda p: p.stat().st_mtime) if base.exists() else []
        found = [p for p in found if p.name.rsplit("-", 1)[0] == name]
        return found[-1] if found else None

    def pod_log(self, namespace: str, name: str, container: str | None = None, *, previous: bool = False) -> str:
        """A locally executed container's output (what `kubectl logs` would show)."""
        pod_dir = self.pod_dir(namespace, name)
        if pod_dir is None:
            raise FileNotFoundError(f"no local-exec pod {namespace}/{name}")
        if container is None:
            pod = self.core().read_namespaced_pod(name, namespace)
            container = pod.spec.containers[0].name
        path = pod_dir / "logs" / (f"{container}.previous.log" if previous else f"{container}.log")
        return path.read_text(errors="replace") if path.exists() else ""

    # --- status ----------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        procs = {}
        for name in BACKGROUND:
            pid = self.pid(name)
            alive = self.process_alive(name)
            procs[name] = {
                "pid": pid,
                "alive": alive,
                "rss_mib": round((processes.rss_kib(pid) or 0) / 1024, 1) if pid and alive else None,
            }
        return {
            "run_dir": str(self.paths.root),
            "run_id": self.state.get("run_id"),
            "running": self.is_running() if self.state else False,
            "kubeconfig": str(self.kubeconfig),
            "api_url": self.api_url if self.state else None,
            "prometheus_url": self.prometheus_url if self.state else None,
            "startup_seconds": self.state.get("startup_seconds"),
            "processes": procs,
        }
