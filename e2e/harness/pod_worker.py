"""The harness kubelet's pod lifecycle: one pod from volume set-up to deletion.

A PodWorker thread allocates the pod's devices, materialises its volumes (refreshing projected
tokens), runs init containers in order and then the containers (through ContainerRunner),
reports container states, conditions and phase in the pod status, and terminates the pod's
processes (containers first, then sidecars) before finishing its deletion.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubernetes.dynamic.exceptions import NotFoundError

from . import podspec, podvolumes, processes
from .config import CONTAINER_MARKER_ENV, POD_MARKER_ENV, RUN_MARKER_ENV
from .containers import ContainerRunner, log, now_iso
from .podspec import PodConfigError
from .podvolumes import VolumeContent, volume_content

if TYPE_CHECKING:
    from .kubelet import Kubelet

DEVICE_ENV = {"nvidia.com/gpu": "NVIDIA_VISIBLE_DEVICES", "huawei.com/Ascend910": "ASCEND_VISIBLE_DEVICES"}
"""Extended resources whose allocated device indices are exported, as the device plugins do."""

TICK = 0.1
SHUTDOWN_GRACE = 3.0
"""Grace period per pod when the kubelet itself is stopped (cluster teardown)."""


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
            self._lookups[key] = None if obj is None else podvolumes.decode_secret(obj.get("data"))
        return self._lookups[key]

    def configmap(self, name: str) -> Mapping[str, bytes] | None:
        key = f"configmap/{name}"
        if key not in self._lookups:
            obj = self.kubelet.get_or_none(f"/api/v1/namespaces/{self.namespace}/configmaps/{name}")
            self._lookups[key] = (
                None if obj is None else podvolumes.encode_configmap(obj.get("data"), obj.get("binaryData"))
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

    def _write_volume(self, name: str, content: VolumeContent) -> None:
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
            content = volume_content(
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
                content = volume_content(
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
