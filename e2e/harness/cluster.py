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
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path

import yaml

from . import addresses, components, kube, kwok, nodes, pki, processes, prometheus
from .config import COMPONENTS, REPO_ROOT, RUN_MARKER_ENV, binary
from .handle import ClusterError, ClusterHandle, log
from .processes import Timeout, wait_until

KUBELET_SOURCES = (
    "kubelet.py",
    "pod_worker.py",
    "containers.py",
    "podspec.py",
    "podvolumes.py",
    "podexec.py",
    "processes.py",
    "kube.py",
    "config.py",
)


def kubelet_code_hash() -> str:
    """Digest of the local kubelet's code: a reused cluster restarts its kubelet if it changed."""
    h = hashlib.sha256()
    for name in KUBELET_SOURCES:
        h.update((Path(__file__).parent / name).read_bytes())
    return h.hexdigest()[:16]


class Cluster(ClusterHandle):
    """Starts, reuses and stops one run directory's cluster (observations: ClusterHandle).

    `audit_users`: a fresh start records these users' requests in `logs/audit.log` (the soak
    benchmark counts the operator's API calls there); a reused cluster keeps what it started with.
    """

    def __init__(self, run_dir: Path | None = None, *, audit_users: Sequence[str] = ()) -> None:
        super().__init__(run_dir)
        self.audit_users = tuple(audit_users)

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
        audit = None
        if self.audit_users:
            policy = self.paths.root / "audit-policy.yaml"
            policy.write_text(yaml.safe_dump(components.audit_policy(self.audit_users)))
            audit = (policy, self.paths.audit_log)
        self._start("kube-apiserver", components.apiserver(the_pki, ports, audit))
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

    # --- faults (chaos tests) ---------------------------------------------------------------

    def stop_component(self, name: str, *, grace: float = 10, kill: bool = False) -> None:
        """Stop one control-plane process (SIGTERM, or SIGKILL with `kill`), keeping its data; the
        cluster counts as not running until start_component brings it back."""
        pid = self.pid(name)
        if pid is None or not self.process_alive(name):
            raise ClusterError(f"{name} is not running")
        processes.terminate_groups([pid], grace=0 if kill else grace)
        self.state.setdefault("stopped", []).append(name)
        self._save_state()
        log(f"stopped {name} (pid {pid}{', SIGKILL' if kill else ''})")

    def start_component(self, name: str, *, timeout: float = 120) -> float:
        """Start a stopped control-plane process again with its recorded command line; returns the
        seconds until it was healthy."""
        probes: dict[str, Callable[[], bool]] = {
            "etcd": lambda: components.etcd_healthy(self.ports),
            "kube-apiserver": lambda: components.apiserver_ready(self.ports, self.pki),
            "kube-controller-manager": lambda: components.component_healthy(self.ports.controller_manager),
            "kube-scheduler": lambda: components.component_healthy(self.ports.scheduler),
        }
        t0 = time.monotonic()
        self._start(name, self.state["processes"][name]["argv"])
        self._await(name, probes[name], timeout)
        self.state["stopped"] = [n for n in self.state.get("stopped", []) if n != name]
        self._save_state()
        took = time.monotonic() - t0
        log(f"{name} healthy again after {took:.1f}s")
        return took

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

    # --- down ------------------------------------------------------------------------------

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
