"""The harness kubelet's process control: one container's process, restarts and probes.

A ContainerRunner starts its container in its own mount namespace (`unshare -m`, through
podexec.py), polls it, restarts it per restartPolicy with back-off, runs its startup, readiness
and liveness probes, and stops it (SIGTERM, then SIGKILL of everything carrying its marker).
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import podspec, podvolumes, processes
from .config import CONTAINER_MARKER_ENV, POD_MARKER_ENV
from .podspec import ContainerState, PodConfigError, Probe

if TYPE_CHECKING:
    from .pod_worker import PodWorker

PODEXEC = Path(__file__).with_name("podexec.py")

BACKOFF_BASE = float(os.environ.get("SEMIPD_KUBELET_BACKOFF_BASE", "1"))
BACKOFF_CAP = float(os.environ.get("SEMIPD_KUBELET_BACKOFF_CAP", "20"))
BACKOFF_RESET_AFTER = 60.0
"""A container that ran this long before exiting restarts without accumulated back-off."""


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def log(msg: str) -> None:
    print(f"[kubelet {time.strftime('%H:%M:%S')}] {msg}", flush=True)


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
            mounts = podvolumes.mounts(self.spec, self.w.volume_dirs, env)
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
