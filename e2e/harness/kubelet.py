"""The harness's local kubelet: runs opted-in pods' containers as local processes.

kwok gives a pod annotated `semipd.io/local-exec: "true"` its IP from the node's 127/8 pod CIDR;
this process (started by `up`, one per cluster) then does what a kubelet does for it:
materialises volumes (emptyDir, secret, configMap, downwardAPI, projected ServiceAccount tokens
from the TokenRequest API) as per-pod directories; runs init containers in order, then the
containers, each in its own mount namespace (`unshare -m`) with the volume directories bound at
their mountPaths; restarts them per restartPolicy with back-off; runs readiness and liveness
probes; reports container states, conditions and phase in the pod status and Events; and stops
the processes (SIGTERM, SIGKILL after the grace period) when the pod is deleted, then removes it.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubernetes import client, watch
from kubernetes.dynamic.exceptions import ConflictError, NotFoundError

from . import kube, podspec, processes
from .config import CONTAINER_MARKER_ENV, LOCAL_EXEC_ANNOTATION, POD_MARKER_ENV, RUN_MARKER_ENV, RunPaths
from .podspec import ContainerState, PodConfigError, Probe

PODEXEC = Path(__file__).with_name("podexec.py")
COMPONENT = "semipd-local-kubelet"
DEVICE_ENV = {"nvidia.com/gpu": "NVIDIA_VISIBLE_DEVICES", "huawei.com/Ascend910": "ASCEND_VISIBLE_DEVICES"}
"""Extended resources whose allocated device indices are exported, as the device plugins do."""

BACKOFF_BASE = float(os.environ.get("SEMIPD_KUBELET_BACKOFF_BASE", "1"))
BACKOFF_CAP = float(os.environ.get("SEMIPD_KUBELET_BACKOFF_CAP", "20"))
BACKOFF_RESET_AFTER = 60.0
"""A container that ran this long before exiting restarts without accumulated back-off."""
TICK = 0.1
SHUTDOWN_GRACE = 3.0
"""Grace period per pod when the kubelet itself is stopped (cluster teardown)."""


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def log(msg: str) -> None:
    print(f"[kubelet {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class DeviceAllocator:
    """Per-node device indices for extended resources, like a device plugin's Allocate."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._used: dict[tuple[str, str], dict[int, str]] = {}

    def allocate(self, node: str, resource: str, count: int, owner: str) -> list[int]:
        with self._lock:
            used = self._used.setdefault((node, resource), {})
            free = [i for i in range(1024) if i not in used][:count]
            for i in free:
                used[i] = owner
            return free

    def release(self, owner: str) -> None:
        with self._lock:
            for used in self._used.values():
                for i in [i for i, o in used.items() if o == owner]:
                    del used[i]


class Kubelet:
    def __init__(self, paths: RunPaths) -> None:
        state = json.loads(paths.state.read_text())
        self.paths = paths
        self.run_id: str = state["run_id"]
        self.api_port: int = state["ports"]["apiserver"]
        kubeconfig = paths.component_kubeconfig("kubelet")
        self.api = kube.api_client(kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.dyn = kube.dynamic_client(kubeconfig)
        self.devices = DeviceAllocator()
        self.workers: dict[str, PodWorker] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.python_bin = str(Path(sys.executable).parent)
        self.unshare = shutil.which("unshare")
        self.nsenter = shutil.which("nsenter")
        self.shm_root = Path("/dev/shm") / f"semipd-e2e-{self.run_id}"

    # --- API helpers (raw JSON through the dynamic client) ------------------------------------

    def request(self, method: str, path: str, body: Any = None, **params: Any) -> dict[str, Any]:
        result = self.dyn.request(method, path, body=body, **params)
        return result.to_dict() if hasattr(result, "to_dict") else dict(result)

    def get_or_none(self, path: str) -> dict[str, Any] | None:
        try:
            return self.request("GET", path)
        except NotFoundError:
            return None

    def event(self, pod: Mapping[str, Any], kind: str, reason: str, message: str, container: str | None = None) -> None:
        meta = pod["metadata"]
        ts = now_iso()
        involved = {
            "kind": "Pod",
            "apiVersion": "v1",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta["uid"],
        }
        if container:
            involved["fieldPath"] = f"spec.containers{{{container}}}"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}", "namespace": meta["namespace"]},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": COMPONENT, "host": pod["spec"].get("nodeName", "")},
            "reportingComponent": COMPONENT,
            "reportingInstance": pod["spec"].get("nodeName", ""),
            "firstTimestamp": ts,
            "lastTimestamp": ts,
            "count": 1,
        }
        try:
            self.request("POST", f"/api/v1/namespaces/{meta['namespace']}/events", body=body)
        except Exception as exc:  # events are best effort, as in the real kubelet
            status = getattr(exc, "status", None)
            if status != 403:  # 403: the namespace is terminating
                log(
                    f"event {reason} for {meta['namespace']}/{meta['name']} not recorded: "
                    f"{type(exc).__name__} {status or exc}"
                )

    def force_delete(self, namespace: str, name: str, uid: str) -> None:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        with contextlib.suppress(NotFoundError, ConflictError):  # already gone, or a newer pod
            self.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", body=body)

    # --- pod watch ---------------------------------------------------------------------------

    @staticmethod
    def eligible(pod: Mapping[str, Any]) -> bool:
        meta, spec, status = pod["metadata"], pod.get("spec", {}), pod.get("status", {})
        return (
            (meta.get("annotations") or {}).get(LOCAL_EXEC_ANNOTATION) == "true"
            and bool(spec.get("nodeName"))
            and bool(status.get("podIP"))
        )

    def handle(self, kind: str, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        with self.lock:
            worker = self.workers.get(uid)
        if worker is not None:
            if kind == "DELETED":
                worker.removed()
            else:
                worker.update(pod)
            return
        if kind == "DELETED" or not self.eligible(pod):
            return
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            # Deleted before it ever ran here: nothing to stop, just finish the deletion.
            self.force_delete(meta["namespace"], meta["name"], uid)
            return
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            return
        worker = PodWorker(self, pod)
        with self.lock:
            self.workers[uid] = worker
        worker.start()

    def forget(self, uid: str) -> None:
        with self.lock:
            self.workers.pop(uid, None)

    def watch_loop(self) -> None:
        while not self.stopping.is_set():
            try:
                resp = self.core.list_pod_for_all_namespaces(_preload_content=False)
                listing = json.loads(resp.data)
                seen = set()
                for pod in listing["items"]:
                    seen.add(pod["metadata"]["uid"])
                    self.handle("ADDED", pod)
                with self.lock:
                    vanished = [worker for uid, worker in self.workers.items() if uid not in seen]
                for worker in vanished:
                    worker.removed()
                self.paths.kubelet_ready.touch()
                rv = listing["metadata"]["resourceVersion"]
                stream = watch.Watch()
                for ev in stream.stream(
                    self.core.list_pod_for_all_namespaces,
                    resource_version=rv,
                    timeout_seconds=300,
                    allow_watch_bookmarks=True,
                    deserialize=False,
                ):
                    if self.stopping.is_set():
                        stream.stop()
                        break
                    if ev["type"] == "BOOKMARK":
                        continue
                    self.handle(ev["type"], ev["object"])
            except Exception as exc:
                if self.stopping.is_set():
                    break
                log(f"pod watch failed, relisting: {exc!r}")
                time.sleep(1)

    # --- lifecycle ---------------------------------------------------------------------------

    def sweep_orphans(self) -> None:
        """Kill pod processes left by a previous kubelet of this cluster (it crashed or was killed)."""
        me = os.getpid()
        for pid in processes.pids_with_marker(RUN_MARKER_ENV, self.run_id):
            if pid != me and f"{POD_MARKER_ENV}=".encode() in processes.environ_of(pid):
                processes.signal_pid(pid, signal.SIGKILL)

    def run(self) -> None:
        if not self.unshare:
            raise SystemExit("unshare(1) not found: run e2e/install-deps.sh")
        probe = subprocess.run([self.unshare, "--mount", "--propagation", "private", "true"], capture_output=True)
        if probe.returncode != 0:
            raise SystemExit(
                f"unshare --mount does not work here ({probe.stderr.decode().strip()}); "
                "the local kubelet needs root for per-pod mount namespaces"
            )
        self.sweep_orphans()
        signal.signal(signal.SIGTERM, lambda *_: self.stopping.set())
        signal.signal(signal.SIGINT, lambda *_: self.stopping.set())
        watcher = threading.Thread(target=self.watch_loop, name="pod-watch", daemon=True)
        watcher.start()
        log(f"watching pods (run {self.run_id}, apiserver port {self.api_port})")
        self.stopping.wait()
        log("stopping: terminating local pods")
        with self.lock:
            workers = list(self.workers.values())
        for w in workers:
            w.shutdown()
        for w in workers:
            w.join(timeout=SHUTDOWN_GRACE + 5)
        shutil.rmtree(self.shm_root, ignore_errors=True)
        log("stopped")


class ContainerRunner:
    """One container of a pod: its process, restarts, probes and reported state."""

    def __init__(self, worker: PodWorker, spec: dict[str, Any], kind: str) -> None:
        self.w = worker
        self.spec = spec
        self.name: str = spec["name"]
        self.kind = kind  # init | sidecar | main
        self.policy = podspec.restart_policy(worker.pod, spec, init=kind != "main")
        self.state = ContainerState(self.name, spec.get("image", ""))
        self.proc: subprocess.Popen[bytes] | None = None
        self.next_start: float | None = 0.0
        self.started_at = ""
        self.started_mono = 0.0
        self.backoff_n = 0
        self.done = False
        self.final = False
        """Set when the container is being stopped for good (its pod finished): no restart."""
        self.ever_started = False
        self.env: dict[str, str] = {}
        self.startup: Probe | None = None
        self.readiness: Probe | None = None
        self.liveness: Probe | None = None
        self.probe_due: dict[str, float] = {}
        self.probe_ok: dict[str, int] = {}
        self.probe_fail: dict[str, int] = {}

    @property
    def log_path(self) -> Path:
        return self.w.dir / "logs" / f"{self.name}.log"

    def tick(self, now: float) -> None:
        if self.proc is None and not self.done and self.next_start is not None and now >= self.next_start:
            self._start(now)
        elif self.proc is not None:
            self._poll(now)

    def _start(self, now: float) -> None:
        pod = self.w.pod
        self.w.forget_lookups()  # each (re)start sees the current Secrets and ConfigMaps
        try:
            env = podspec.resolve_env(
                pod, self.spec, base=self.w.base_env(self), secrets=self.w.secret, configmaps=self.w.configmap
            )
            argv = podspec.command_line(self.spec, env)
            mounts = podspec.mounts(self.spec, self.w.volume_dirs, env)
            pod_ip = pod["status"]["podIP"]
            self.startup = podspec.probe(self.spec, "startupProbe", pod_ip)
            self.readiness = podspec.probe(self.spec, "readinessProbe", pod_ip)
            self.liveness = podspec.probe(self.spec, "livenessProbe", pod_ip)
        except PodConfigError as exc:
            self.state.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
            self.w.kubelet.event(pod, "Warning", "Failed", f"Error: {exc}", self.name)
            self.backoff_n += 1
            self.next_start = now + podspec.backoff_delay(self.backoff_n, base=BACKOFF_BASE, cap=BACKOFF_CAP)
            return
        cwd = self.spec.get("workingDir") or str(self.w.dir / "work")
        launch = {
            "mounts": [{"source": m.source, "target": m.target, "read_only": m.read_only} for m in mounts],
            "cwd": cwd,
            "argv": argv,
            "env": env,
        }
        spec_file = self.w.dir / "launch" / f"{self.name}.json"
        spec_file.parent.mkdir(parents=True, exist_ok=True)
        spec_file.write_text(json.dumps(launch, indent=1))
        if self.ever_started and self.log_path.exists():
            self.log_path.replace(self.log_path.with_name(f"{self.name}.previous.log"))
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        kubelet = self.w.kubelet
        assert kubelet.unshare is not None
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                [
                    kubelet.unshare,
                    "--mount",
                    "--propagation",
                    "private",
                    "--",
                    sys.executable,
                    "-I",
                    "-S",
                    str(PODEXEC),
                    str(spec_file),
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        if self.ever_started:
            self.state.restart_count += 1
        self.ever_started = True
        self.env = env
        self.started_mono = now
        self.started_at = now_iso()
        self.state.state = {"running": {"startedAt": self.started_at}}
        # With a startupProbe the container counts as started (and may become ready, and is
        # liveness-checked) only once that probe succeeded.
        self.state.started = self.startup is None
        self.state.ready = self.readiness is None and self.startup is None
        self.probe_due = {
            k: now + p.initial_delay
            for k, p in (("startup", self.startup), ("readiness", self.readiness), ("liveness", self.liveness))
            if p
        }
        self.probe_ok, self.probe_fail = {}, {}
        kubelet.event(pod, "Normal", "Started", f"Started container {self.name} (pid {self.proc.pid})", self.name)

    def _poll(self, now: float) -> None:
        assert self.proc is not None
        rc = self.proc.poll()
        if rc is None:
            self._probe(now)
            return
        pid = self.proc.pid
        self.proc = None
        self.kill_leftovers(pid)
        code = rc if rc >= 0 else 128 - rc
        term = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": self.started_at,
            "finishedAt": now_iso(),
            "containerID": "",
        }
        self.state.ready = False
        self.state.started = False
        pod = self.w.pod
        if self.w.terminating or self.final or not podspec.should_restart(self.policy, code):
            self.state.state = {"terminated": term}
            self.done = True
            if not self.w.terminating and not self.final:
                kind = "Normal" if code == 0 else "Warning"
                self.w.kubelet.event(pod, kind, "Exited", f"Container {self.name} exited with code {code}", self.name)
            return
        if now - self.started_mono >= BACKOFF_RESET_AFTER:
            self.backoff_n = 0
        self.backoff_n += 1
        delay = podspec.backoff_delay(self.backoff_n, base=BACKOFF_BASE, cap=BACKOFF_CAP)
        self.state.last_state = {"terminated": term}
        self.state.state = {
            "waiting": {
                "reason": "CrashLoopBackOff",
                "message": f"back-off {delay:g}s restarting failed container={self.name}",
            }
        }
        self.next_start = now + delay
        self.w.kubelet.event(
            pod,
            "Warning",
            "BackOff",
            f"Container {self.name} exited with code {code}; restarting in {delay:g}s",
            self.name,
        )

    def _probe(self, now: float) -> None:
        if self.startup is not None and not self.state.started:
            self._startup_probe(now, self.startup)
            return
        for which, probe in (("readiness", self.readiness), ("liveness", self.liveness)):
            if probe is None or now < self.probe_due.get(which, 0):
                continue
            self.probe_due[which] = now + probe.period
            ok = self._run_probe(probe)
            if ok:
                self.probe_ok[which] = self.probe_ok.get(which, 0) + 1
                self.probe_fail[which] = 0
            else:
                self.probe_fail[which] = self.probe_fail.get(which, 0) + 1
                self.probe_ok[which] = 0
            if which == "readiness":
                if ok and self.probe_ok[which] >= probe.success_threshold:
                    self.state.ready = True
                elif not ok and self.probe_fail[which] >= probe.failure_threshold:
                    self.state.ready = False
            elif not ok and self.probe_fail[which] >= probe.failure_threshold and self.proc is not None:
                self.w.kubelet.event(
                    self.w.pod,
                    "Warning",
                    "Unhealthy",
                    f"Liveness probe failed {probe.failure_threshold} times; restarting",
                    self.name,
                )
                self.stop(self.w.grace_seconds())

    def _startup_probe(self, now: float, probe: Probe) -> None:
        if now < self.probe_due.get("startup", 0):
            return
        self.probe_due["startup"] = now + probe.period
        if self._run_probe(probe):
            self.state.started = True
            self.state.ready = self.readiness is None
            for which in ("readiness", "liveness"):
                self.probe_due[which] = now
            return
        self.probe_fail["startup"] = self.probe_fail.get("startup", 0) + 1
        if self.probe_fail["startup"] >= probe.failure_threshold and self.proc is not None:
            self.w.kubelet.event(
                self.w.pod,
                "Warning",
                "Unhealthy",
                f"Startup probe failed {probe.failure_threshold} times; restarting",
                self.name,
            )
            self.stop(self.w.grace_seconds())

    def _run_probe(self, probe: Probe) -> bool:
        try:
            if probe.kind == "tcpSocket":
                with socket.create_connection((probe.host, probe.port), timeout=probe.timeout):
                    return True
            if probe.kind == "httpGet":
                conn: http.client.HTTPConnection
                if probe.scheme.upper() == "HTTPS":
                    conn = http.client.HTTPSConnection(
                        probe.host, probe.port, timeout=probe.timeout, context=ssl._create_unverified_context()
                    )
                else:
                    conn = http.client.HTTPConnection(probe.host, probe.port, timeout=probe.timeout)
                try:
                    conn.request("GET", probe.path, headers=dict(probe.headers))
                    return 200 <= conn.getresponse().status < 400
                finally:
                    conn.close()
            if probe.kind == "exec" and self.proc is not None and self.w.kubelet.nsenter:
                r = subprocess.run(
                    [self.w.kubelet.nsenter, "-t", str(self.proc.pid), "-m", "--", *probe.command],
                    env=self.env,
                    capture_output=True,
                    timeout=probe.timeout,
                )
                return r.returncode == 0
        except (OSError, subprocess.TimeoutExpired, http.client.HTTPException):
            return False
        return False

    def terminate(self) -> None:
        """SIGTERM the main process only, as a runtime signals a container's PID 1; what it does
        with its children (e.g. an agent draining its workers) is up to it."""
        if self.proc is not None:
            processes.signal_pid(self.proc.pid, signal.SIGTERM)

    def kill(self) -> None:
        if self.proc is not None:
            self.kill_leftovers(self.proc.pid)

    def kill_leftovers(self, pid: int) -> None:
        """SIGKILL the container's process group and anything else carrying its marker (a
        runtime tears down the whole PID namespace when PID 1 goes)."""
        processes.signal_group(pid, signal.SIGKILL)
        marked = processes.pids_with_markers({POD_MARKER_ENV: self.w.uid, CONTAINER_MARKER_ENV: self.name})
        for p in marked:
            processes.signal_pid(p, signal.SIGKILL)
        # Gone before a restart binds the same ports again.
        processes.wait_gone(marked, 5.0)

    def stop(self, grace: float, *, final: bool = False) -> None:
        """SIGTERM the container's main process, SIGKILL all of it after `grace` seconds; it then
        restarts per its policy unless `final`."""
        self.final = self.final or final
        if self.proc is None:
            if final:
                self.done = True
            return
        self.terminate()
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.kill()
            self.proc.wait(timeout=10)
        self._poll(time.monotonic())


class PodWorker(threading.Thread):
    """Runs one pod from volume set-up to deletion."""

    def __init__(self, kubelet: Kubelet, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        super().__init__(name=f"pod-{meta['namespace']}/{meta['name']}", daemon=True)
        self.kubelet = kubelet
        self.pod = pod
        self.uid: str = meta["uid"]
        self.namespace: str = meta["namespace"]
        self.pod_name: str = meta["name"]
        self.dir = kubelet.paths.pods / self.namespace / f"{self.pod_name}-{self.uid[:8]}"
        self.deleting = threading.Event()
        self.gone = threading.Event()
        self.shutting_down = threading.Event()
        self.terminating = False
        self.volume_dirs: dict[str, str] = {}
        self.refresh_at: float | None = None
        self.refresh_period = 0.0
        self.devices: dict[str, list[int]] = {}
        self.inits = [
            ContainerRunner(self, c, "sidecar" if podspec.is_sidecar(c) else "init")
            for c in pod["spec"].get("initContainers") or []
        ]
        self.mains = [ContainerRunner(self, c, "main") for c in pod["spec"]["containers"]]
        self.init_index = 0
        self.initialized = not self.inits
        self.failed_init = False
        self.finished = False
        self.start_time = now_iso()
        self.reported: dict[str, Any] | None = None
        self.conditions: list[dict[str, Any]] = []
        self._lookups: dict[str, Mapping[str, bytes] | None] = {}

    # --- inputs from the watch ---------------------------------------------------------------

    def update(self, pod: dict[str, Any]) -> None:
        self.pod = pod
        if pod["metadata"].get("deletionTimestamp"):
            self.deleting.set()

    def removed(self) -> None:
        self.gone.set()
        self.deleting.set()

    def shutdown(self) -> None:
        self.shutting_down.set()
        self.deleting.set()

    def grace_seconds(self) -> float:
        meta, spec = self.pod["metadata"], self.pod["spec"]
        grace = meta.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = spec.get("terminationGracePeriodSeconds", 30)
        return float(grace)

    # --- lookups -----------------------------------------------------------------------------

    def forget_lookups(self) -> None:
        self._lookups.clear()

    def secret(self, name: str) -> Mapping[str, bytes] | None:
        key = f"secret/{name}"
        if key not in self._lookups:
            obj = self.kubelet.get_or_none(f"/api/v1/namespaces/{self.namespace}/secrets/{name}")
            self._lookups[key] = None if obj is None else podspec.decode_secret(obj.get("data"))
        return self._lookups[key]

    def configmap(self, name: str) -> Mapping[str, bytes] | None:
        key = f"configmap/{name}"
        if key not in self._lookups:
            obj = self.kubelet.get_or_none(f"/api/v1/namespaces/{self.namespace}/configmaps/{name}")
            self._lookups[key] = (
                None if obj is None else podspec.encode_configmap(obj.get("data"), obj.get("binaryData"))
            )
        return self._lookups[key]

    def mint_token(self, audience: str | None, expiration: int) -> str:
        sa = self.pod["spec"].get("serviceAccountName") or "default"
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [audience] if audience else [],
                "expirationSeconds": expiration,
                "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": self.pod_name, "uid": self.uid},
            },
        }
        result = self.kubelet.request(
            "POST", f"/api/v1/namespaces/{self.namespace}/serviceaccounts/{sa}/token", body=body
        )
        return str(result["status"]["token"])

    # --- set-up ------------------------------------------------------------------------------

    def base_env(self, runner: ContainerRunner) -> dict[str, str]:
        """The 'image and runtime' environment every container starts from."""
        port = str(self.kubelet.api_port)
        env = {
            "PATH": f"{self.kubelet.python_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": str(self.dir / "home"),
            "HOSTNAME": self.pod_name,
            "LANG": "C.UTF-8",
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": port,
            "KUBERNETES_SERVICE_PORT_HTTPS": port,
            "KUBERNETES_PORT": f"tcp://127.0.0.1:{port}",
            "POD_IP": self.pod["status"]["podIP"],
            RUN_MARKER_ENV: self.kubelet.run_id,
            POD_MARKER_ENV: self.uid,
            CONTAINER_MARKER_ENV: runner.name,
        }
        for resource, var in DEVICE_ENV.items():
            if f"{runner.name}/{resource}" in self.devices:
                env[var] = ",".join(str(i) for i in self.devices[f"{runner.name}/{resource}"])
        return env

    def _allocate_devices(self) -> None:
        node = self.pod["spec"]["nodeName"]
        for c in self.pod["spec"]["containers"]:
            limits = (c.get("resources") or {}).get("limits") or {}
            for resource in DEVICE_ENV:
                count = int(limits.get(resource, 0) or 0)
                if count:
                    self.devices[f"{c['name']}/{resource}"] = self.kubelet.devices.allocate(
                        node, resource, count, self.uid
                    )

    def _write_volume(self, name: str, content: podspec.VolumeContent) -> None:
        target = Path(self.volume_dirs[name])
        target.mkdir(parents=True, exist_ok=True)
        for f in content.files or []:
            path = target / f.path
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_bytes(f.data)
            tmp.chmod(f.mode)
            tmp.replace(path)

    def prepare_volumes(self) -> float | None:
        """Materialise every volume; returns when to refresh token volumes (None: never)."""
        refresh_after: float | None = None
        self.forget_lookups()
        for vol in self.pod["spec"].get("volumes") or []:
            content = podspec.volume_content(
                self.pod, vol, secrets=self.secret, configmaps=self.configmap, mint_token=self.mint_token
            )
            name = vol["name"]
            if content.host_path is not None:
                os.makedirs(content.host_path, exist_ok=True)
                self.volume_dirs[name] = content.host_path
                continue
            base = self.kubelet.shm_root / self.uid if content.memory else self.dir / "volumes"
            self.volume_dirs[name] = str(base / name)
            self._write_volume(name, content)
            if content.refresh:
                projected = vol["projected"]["sources"]
                exp = min(
                    int(s["serviceAccountToken"].get("expirationSeconds", 3600))
                    for s in projected
                    if "serviceAccountToken" in s
                )
                refresh_after = min(refresh_after or exp * 0.8, exp * 0.8)
        return refresh_after

    def refresh_tokens(self) -> None:
        for vol in self.pod["spec"].get("volumes") or []:
            if "projected" in vol:
                content = podspec.volume_content(
                    self.pod, vol, secrets=self.secret, configmaps=self.configmap, mint_token=self.mint_token
                )
                if content.refresh:
                    self._write_volume(vol["name"], content)

    # --- main loop ---------------------------------------------------------------------------

    def run(self) -> None:
        try:
            self._run()
        except Exception:
            log(f"pod {self.namespace}/{self.pod_name} worker crashed:\n{traceback.format_exc()}")
            self.kubelet.event(self.pod, "Warning", "LocalKubeletError", traceback.format_exc(limit=3)[-1000:])
            self._terminate()
        finally:
            self.kubelet.devices.release(self.uid)
            shutil.rmtree(self.kubelet.shm_root / self.uid, ignore_errors=True)
            shutil.rmtree(self.dir / "volumes", ignore_errors=True)
            self.kubelet.forget(self.uid)

    def _run(self) -> None:
        (self.dir / "logs").mkdir(parents=True, exist_ok=True)
        self._allocate_devices()
        delay = 1.0
        while not self.deleting.is_set():
            try:
                after = self.prepare_volumes()
                if after is not None:
                    self.refresh_period = after
                    self.refresh_at = time.monotonic() + after
                break
            except (PodConfigError, OSError) as exc:
                self.kubelet.event(self.pod, "Warning", "FailedMount", str(exc))
                self.report()
                self.deleting.wait(delay)
                delay = min(delay * 2, 10)
        while not self.deleting.is_set():
            now = time.monotonic()
            self._step(now)
            if self.refresh_at is not None and now >= self.refresh_at:
                self.refresh_tokens()
                self.refresh_at = now + self.refresh_period
            self.report()
            self.deleting.wait(TICK)
        self._terminate()

    def _step(self, now: float) -> None:
        for r in self.inits:
            if r.kind == "sidecar" and r.ever_started:
                r.tick(now)
        if not self.initialized and not self.failed_init:
            while self.init_index < len(self.inits):
                r = self.inits[self.init_index]
                r.tick(now)
                if r.kind == "sidecar":
                    if not r.state.started:
                        return
                elif not r.done:
                    return
                elif r.state.exit_code != 0:
                    self.failed_init = True
                    self.kubelet.event(
                        self.pod,
                        "Warning",
                        "InitFailed",
                        f"Init container {r.name} failed with code {r.state.exit_code}",
                        r.name,
                    )
                    return
                self.init_index += 1
            self.initialized = True
        if self.failed_init or self.finished:
            return
        for r in self.mains:
            r.tick(now)
        phase = self.phase()
        if phase in ("Succeeded", "Failed"):
            for r in reversed(self.inits):
                if r.kind == "sidecar":
                    r.stop(self.grace_seconds(), final=True)
            self.finished = True

    def phase(self) -> str:
        policy = str(self.pod["spec"].get("restartPolicy") or "Always")
        return podspec.pod_phase(
            policy, [r.state for r in self.mains], initialized=self.initialized, failed_init=self.failed_init
        )

    def report(self) -> None:
        if self.gone.is_set():
            return
        ready = (
            self.initialized
            and all(r.state.ready for r in self.mains)
            and all(r.state.ready for r in self.inits if r.kind == "sidecar")
        )
        phase = self.phase()
        ready = ready and phase == "Running"
        conds = podspec.conditions(now_iso(), initialized=self.initialized, ready=ready, previous=self.conditions)
        status = {
            "phase": phase,
            "conditions": conds,
            "startTime": self.start_time,
            "containerStatuses": [r.state.status() for r in self.mains],
            "initContainerStatuses": [r.state.status() for r in self.inits],
        }
        if status == self.reported:
            return
        try:
            self.kubelet.request(
                "PATCH",
                f"/api/v1/namespaces/{self.namespace}/pods/{self.pod_name}/status",
                body={"status": status},
                content_type="application/merge-patch+json",
            )
        except NotFoundError:
            self.gone.set()
            return
        except Exception as exc:
            log(f"status patch for {self.namespace}/{self.pod_name} failed: {exc!r}")
            return
        self.conditions = conds
        self.reported = status

    def _terminate(self) -> None:
        self.terminating = True
        grace = SHUTDOWN_GRACE if self.shutting_down.is_set() else self.grace_seconds()
        running = [r for r in self.mains + self.inits if r.proc is not None]
        if running and not self.shutting_down.is_set():
            self.kubelet.event(
                self.pod, "Normal", "Killing", f"Stopping containers {[r.name for r in running]} (grace {grace:g}s)"
            )
        deadline = time.monotonic() + grace
        for r in self.mains:  # containers first, then sidecars, as the kubelet does
            r.terminate()
        self._wait(self.mains, deadline)
        sidecars = [r for r in self.inits if r.kind == "sidecar" or r.proc is not None]
        for r in sidecars:
            r.terminate()
        self._wait(sidecars, max(deadline, time.monotonic() + 1))
        for r in self.mains + self.inits:
            if r.proc is not None:
                r.kill_leftovers(r.proc.pid)
                r.proc.wait(timeout=10)
                r.proc = None
        # Wait until every process of the pod is really gone before the pod object goes: kwok
        # recycles the pod IP on deletion and a new pod may bind the same address at once.
        processes.kill_marked(POD_MARKER_ENV, self.uid, grace=1)
        if not self.gone.is_set() and not self.shutting_down.is_set():
            self.kubelet.force_delete(self.namespace, self.pod_name, self.uid)

    @staticmethod
    def _wait(runners: list[ContainerRunner], deadline: float) -> None:
        while time.monotonic() < deadline and any(r.proc is not None and r.proc.poll() is None for r in runners):
            time.sleep(0.05)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m e2e.harness kubelet")
    parser.add_argument("--run-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    Kubelet(RunPaths(args.run_dir)).run()
