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
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubernetes import client, watch
from kubernetes.dynamic.exceptions import ConflictError, NotFoundError

from . import kube, processes
from .config import LOCAL_EXEC_ANNOTATION, POD_MARKER_ENV, RUN_MARKER_ENV, RunPaths
from .containers import log, now_iso
from .pod_worker import SHUTDOWN_GRACE, PodWorker

COMPONENT = "semipd-local-kubelet"


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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m e2e.harness kubelet")
    parser.add_argument("--run-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    Kubelet(RunPaths(args.run_dir)).run()
