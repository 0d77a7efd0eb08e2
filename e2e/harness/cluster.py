"""Bring a local cluster up, find a running one, tear it down.

`up()` starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, the harness
kubelet and Prometheus as detached processes, waits until each is healthy, creates the node
pools and records pids and ports in `<run dir>/state.json`. A second `up()` on the same run
directory reuses the cluster if every recorded process is still alive and the apiserver is ready.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client

from . import addresses, components, kube, kwok, nodes, pki, processes, prometheus
from .config import COMPONENTS, REPO_ROOT, RUN_MARKER_ENV, RunPaths, binary, default_run_dir
from .processes import Fatal, Timeout, wait_until

CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
BACKGROUND = (*CONTROL_PLANE, "kubelet", "prometheus")
STOP_ORDER = ("prometheus", "kubelet", "kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd")


KUBELET_SOURCES = ("kubelet.py", "podspec.py", "podexec.py", "processes.py", "kube.py", "config.py")


def kubelet_code_hash() -> str:
    """Digest of the local kubelet's code: a reused cluster restarts its kubelet if it changed."""
    h = hashlib.sha256()
    for name in KUBELET_SOURCES:
        h.update((Path(__file__).parent / name).read_bytes())
    return h.hexdigest()[:16]


def log(msg: str) -> None:
    print(f"[harness {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class ClusterError(Fatal):
    pass


class Cluster:
    """A handle on one run directory's cluster (running or not)."""

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
        return subprocess.run(
            [str(binary("kubectl")), f"--kubeconfig={self.kubeconfig}", *args],
            check=check,
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
        )

    # --- processes ---------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        home = self.paths.root / "home"
        home.mkdir(parents=True, exist_ok=True)
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),  # kwok reads $HOME/.kwok/kwok.yaml first; keep it ours
            "KWOK_WORKDIR": str(self.paths.kwok),
            "LANG": "C.UTF-8",
            RUN_MARKER_ENV: self.run_id,
        }

    def _start(self, name: str, argv: Sequence[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> int:
        proc = processes.spawn(argv, log=self.paths.log(name), env=env or self._env(), cwd=cwd)
        self._children[name] = proc
        self.state.setdefault("processes", {})[name] = {
            "pid": proc.pid,
            "argv": list(argv),
            "log": str(self.paths.log(name)),
        }
        self._save_state()
        return proc.pid

    def _await(self, name: str, probe: Callable[[], bool], timeout: float) -> None:
        def check() -> bool:
            if not self.process_alive(name):
                raise ClusterError(f"{name} exited during start-up; log tail:\n{self.log_tail(name)}")
            return probe()

        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while True:
            try:
                if check():
                    return
            except ClusterError:
                raise
            except Exception as exc:  # not up yet
                last = exc
            if time.monotonic() > deadline:
                raise Timeout(
                    f"{name} not healthy after {timeout:.0f}s (last: {last!r}); log tail:\n{self.log_tail(name)}"
                )
            time.sleep(0.2)

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.paths.log(name)
        if not path.exists():
            return "(no log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    # --- up ----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Serialise up/down of one run directory across processes (two test sessions)."""
        lock = self.paths.root.parent / f".{self.paths.root.name}.lock"
        lock.parent.mkdir(parents=True, exist_ok=True)
        with lock.open("w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                self.state = self._load_state()  # another process may have changed it meanwhile
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def up(self, pools: Sequence[nodes.NodePool] | None = None, *, reuse: bool = True) -> bool:
        """Start the cluster, or reuse the running one. Returns True if it was reused.

        On reuse the node pools are reconciled to `pools` (default pools when None).
        """
        with self._locked():
            return self._up(list(pools) if pools is not None else nodes.default_pools(), reuse)

    def _up(self, pools: list[nodes.NodePool], reuse: bool) -> bool:
        if reuse and self.is_running():
            log(f"reusing running cluster in {self.paths.root}")
            if self.state.get("kubelet_code") != kubelet_code_hash():
                log("local kubelet code changed: restarting the kubelet (its pods restart too)")
                pid = self.pid("kubelet")
                if pid:
                    processes.terminate_groups([pid], grace=15)
                self._start_kubelet()
            self.set_node_pools(pools)
            self.start_prometheus()  # a test may have left it stopped
            return True
        if self.state:
            log("previous cluster is not (fully) running: tearing it down first")
            self._down(keep_state=False, grace=15)
        self._fresh_start(pools)
        return False

    def _fresh_start(self, pools: Sequence[nodes.NodePool]) -> None:
        missing = [c for c in COMPONENTS if not binary(c).exists()]
        if missing:
            raise ClusterError(f"binaries missing from the cache: {missing}; run e2e/build-binaries.sh")
        t0 = time.monotonic()
        root = self.paths.root
        if root.exists():
            shutil.rmtree(root)
        for d in (root, self.paths.logs, self.paths.kwok, self.paths.prometheus, self.paths.pods):
            d.mkdir(parents=True, exist_ok=True)
        ports = components.Ports(*processes.free_ports(7))
        run_id = uuid.uuid4().hex[:12]
        self.state = {
            "run_id": run_id,
            "ports": asdict(ports),
            "created": time.time(),
            "processes": {},
            "ready": False,
            "address_octet": addresses.acquire(run_id, root),
        }
        self._save_state()
        log(f"pod addresses: {addresses.slice_network(self.address_octet)}")
        self._api = self._dynamic = None
        try:
            self._start_control_plane(ports)
            self.set_node_pools(pools)
            self._start_kubelet()
            self.start_prometheus()
        except BaseException:
            log("start-up failed: stopping what was started")
            self._down(keep_state=True, grace=15)
            raise
        self.state["ready"] = True
        self.state["startup_seconds"] = round(time.monotonic() - t0, 2)
        self._save_state()
        log(f"cluster up in {self.state['startup_seconds']}s; kubeconfig: {self.kubeconfig}")

    def _start_control_plane(self, ports: components.Ports) -> None:
        the_pki = pki.generate(self.paths.pki)
        for ident in pki.IDENTITIES:
            target = self.paths.kubeconfig if ident.name == "admin" else self.paths.component_kubeconfig(ident.name)
            target.write_text(pki.kubeconfig(the_pki, ident.name, ports.api_url))
            target.chmod(0o600)
        (self.paths.kwok / "kwok.yaml").write_text(kwok.config_yaml(addresses.fallback_cidr(self.address_octet)))

        self._start("etcd", components.etcd(self.paths, ports))
        self._await("etcd", lambda: components.etcd_healthy(ports), 30)
        log("etcd healthy")
        self._start("kube-apiserver", components.apiserver(the_pki, ports))
        self._await("kube-apiserver", lambda: components.apiserver_ready(ports, the_pki), 120)
        wait_until(lambda: self.core().read_namespace("default"), timeout=30, what="namespace default")
        log("kube-apiserver ready")
        dyn = self.dynamic()
        kube.apply_all(dyn, [prometheus.CLUSTER_ROLE, prometheus.CLUSTER_ROLE_BINDING])
        self._start("kube-controller-manager", components.controller_manager(self.paths, the_pki, ports))
        self._start("kube-scheduler", components.scheduler(self.paths, ports))
        self._start("kwok", components.kwok(self.paths))
        self._await("kube-controller-manager", lambda: components.component_healthy(ports.controller_manager), 60)
        self._await("kube-scheduler", lambda: components.component_healthy(ports.scheduler), 60)
        # kwok has no health endpoint (we open no port for it); nodes turning Ready prove it works.
        log("controller-manager and scheduler healthy")

    def _start_kubelet(self) -> None:
        self.paths.kubelet_ready.unlink(missing_ok=True)
        self.state["kubelet_code"] = kubelet_code_hash()
        env = self._env()
        env["PYTHONPATH"] = str(REPO_ROOT)
        env["PYTHONUNBUFFERED"] = "1"
        self._start(
            "kubelet",
            [sys.executable, "-m", "e2e.harness", "kubelet", "--run-dir", str(self.paths.root)],
            env=env,
            cwd=REPO_ROOT,
        )
        self._await("kubelet", self.paths.kubelet_ready.exists, 30)
        log("local kubelet watching pods")

    # --- nodes -------------------------------------------------------------------------------

    def managed_nodes(self) -> dict[str, str]:
        """Harness-managed node name -> pod CIDR."""
        items = self.core().list_node(label_selector=f"{nodes.MANAGED_LABEL}=true").items
        return {n.metadata.name: n.spec.pod_cidr for n in items}

    def set_node_pools(self, pools: Sequence[nodes.NodePool], *, timeout: float = 60) -> list[str]:
        """Make exactly these pools' nodes exist and wait until they are Ready. Returns names."""
        core = self.core()
        plan = nodes.plan_nodes(pools, self.managed_nodes(), self.address_octet)
        for name in plan.delete:
            core.delete_node(name)
        node_res = self.dynamic().resources.get(api_version="v1", kind="Node")
        for manifest in plan.create:
            node_res.create(body=manifest)
        names = [n for p in pools for n in p.node_names()]
        self.wait_nodes_ready(names, timeout=timeout)
        wait_until(
            lambda: not (set(self.managed_nodes()) - set(names)),
            timeout=timeout,
            what=f"deleted nodes {plan.delete} to disappear",
        )
        if plan.create or plan.delete:
            log(f"nodes: created {len(plan.create)}, deleted {len(plan.delete)}; {len(names)} Ready")
        self.state["node_pools"] = [p.name for p in pools]
        self._save_state()
        return names

    def wait_nodes_ready(self, names: Sequence[str], *, timeout: float = 60) -> None:
        def ready() -> bool:
            if self.pid("kwok") and not self.process_alive("kwok"):
                raise ClusterError(f"kwok is not running; log tail:\n{self.log_tail('kwok')}")
            got = {n.metadata.name: n for n in self.core().list_node().items}
            for name in names:
                node = got.get(name)
                if node is None:
                    return False
                conds = {c.type: c.status for c in (node.status.conditions or [])}
                if conds.get("Ready") != "True":
                    return False
            return True

        wait_until(ready, timeout=timeout, what=f"nodes Ready: {list(names)}", on_timeout=lambda: self.log_tail("kwok"))

    # --- Prometheus --------------------------------------------------------------------------

    def start_prometheus(self, timeout: float = 60) -> None:
        """Start (or restart) Prometheus on the cluster's fixed port, keeping its TSDB."""
        if self.process_alive("prometheus"):
            return
        cfg = self.paths.prometheus / "prometheus.yml"
        prometheus.write_config(cfg, self.api_url, self.pki, self.ports.prometheus)
        self._start("prometheus", prometheus.argv(cfg, self.paths.prometheus / "data", self.ports.prometheus))
        self._await("prometheus", lambda: components.prometheus_ready(self.ports.prometheus), timeout)
        self.state["prometheus_stopped"] = False
        self._save_state()
        log(f"prometheus ready at {self.prometheus_url}")

    def stop_prometheus(self, grace: float = 10) -> None:
        pid = self.pid("prometheus")
        if pid and self.process_alive("prometheus"):
            processes.terminate_groups([pid], grace=grace)
        self.state["prometheus_stopped"] = True
        self._save_state()

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

    # --- status & down -----------------------------------------------------------------------

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

    def down(self, *, keep_state: bool = False, grace: float = 15) -> list[int]:
        """Stop every process this cluster started; returns pids that needed a SIGKILL sweep."""
        with self._locked():
            return self._down(keep_state=keep_state, grace=grace)

    def _down(self, *, keep_state: bool, grace: float) -> list[int]:
        if not self.state:
            return []
        run_id = self.run_id
        recorded = self.state.get("processes", {})
        # The kubelet stops its pods on SIGTERM; give it a moment before the control plane goes.
        for group in (
            ("prometheus", "kubelet"),
            ("kwok", "kube-scheduler", "kube-controller-manager"),
            ("kube-apiserver",),
            ("etcd",),
        ):
            pids = [int(recorded[n]["pid"]) for n in group if n in recorded and self.process_alive(n)]
            t0 = time.monotonic()
            killed = processes.terminate_groups(pids, grace=grace)
            log(
                f"stopped {', '.join(group)} in {time.monotonic() - t0:.1f}s"
                + (f" (SIGKILLed {killed})" if killed else "")
            )
        leftovers = processes.kill_marked(RUN_MARKER_ENV, run_id, grace=2)
        if leftovers:
            log(f"swept {len(leftovers)} leftover process(es) of run {run_id}: {leftovers}")
        if "address_octet" in self.state:
            addresses.release(self.address_octet, run_id)
        self._api = self._dynamic = None
        if keep_state:
            self.state["ready"] = False
            self._save_state()
        else:
            self.state = {}
            self.paths.state.unlink(missing_ok=True)
        return leftovers
