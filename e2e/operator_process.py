"""Run the real operator (`python -m semipd operator`) as a process against the e2e cluster.

Tests get its log, its metrics URL and a way to kill it by pid, as a crash would.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from semipd.data import upstream_gie_crd

ROOT = Path(__file__).resolve().parents[1]
CRD = ROOT / "crds" / "semipd.io_inferencepools.yaml"
GIE_CRD = Path(str(upstream_gie_crd()))  # shipped as package data
THREAD_RACE_MARKERS = ("Non-thread-safe operation", "changed size during iteration")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def install_crds(cluster: Any, *, gie: bool = True) -> None:
    """Our CRD (and the upstream GIE one), applied server-side and waited for."""
    paths = [CRD, GIE_CRD] if gie else [CRD]
    for path in paths:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    cluster.wait_crd_established("inferencepools.semipd.io")


class OperatorProcess:
    """One operator process watching `namespace`."""

    def __init__(
        self, cluster: Any, namespace: str, workdir: Path, resync: str = "3s", env: dict[str, str] | None = None
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.log = workdir / "operator.log"
        self.key_file = workdir / "token.key"
        if not self.key_file.exists():
            self.key_file.write_text(secrets.token_hex(32))
        self.metrics_port = free_port()
        self.resync = resync
        self.extra_env = dict(env or {})
        self.liveness_url = f"http://127.0.0.1:{free_port()}/healthz"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {
            **os.environ,
            "KUBECONFIG": str(self.cluster.kubeconfig),
            "SEMIPD_NAMESPACES": self.namespace,
            "SEMIPD_RESYNC_INTERVAL": self.resync,
            "SEMIPD_METRICS_PORT": str(self.metrics_port),
            "SEMIPD_LIVENESS_ENDPOINT": self.liveness_url,
            "SEMIPD_TOKEN_KEY_FILE": str(self.key_file),
            "SEMIPD_POD_ANNOTATIONS": "semipd.io/local-exec=true",
            "SEMIPD_TERMINATION_GRACE": "30s",
            "SEMIPD_PROMETHEUS_URL": self.cluster.prometheus_url,
            # asyncio debug mode: a loop call from a worker thread raises and is logged.
            "PYTHONASYNCIODEBUG": "1",
            **self.extra_env,
        }
        env.pop("KUBERNETES_SERVICE_HOST", None)
        with self.log.open("a") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "semipd", "operator"], env=env, stdout=out, stderr=out)
        deadline = time.monotonic() + 90  # the import alone can take tens of seconds on a loaded machine
        while time.monotonic() < deadline:
            try:
                httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=1)
                return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise AssertionError(f"operator did not start:\n{self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        """SIGKILL, as a crash or an evicted pod would."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def metric(self, name: str, **labels: str) -> float:
        """Sum of one metric's samples matching `labels` on the operator's metrics endpoint."""
        text = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text
        total = 0.0
        for line in text.splitlines():
            m = re.match(rf"^{re.escape(name)}(?:\{{(.*)\}})? (\S+)$", line)
            if not m:
                continue
            have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
            if all(have.get(k) == v for k, v in labels.items()):
                total += float(m.group(2))
        return total

    def live(self) -> bool:
        """The liveness endpoint answers 200 (what a kubelet's livenessProbe checks)."""
        try:
            return httpx.get(self.liveness_url, timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def tracebacks(self) -> str:
        text = self.log.read_text()
        return text if "Traceback" in text else ""

    def thread_races(self) -> list[str]:
        """Log lines showing state touched from a worker thread (asyncio debug mode's check, or a
        dict iterated while another thread changed it)."""
        return [line for line in self.log.read_text().splitlines() if any(m in line for m in THREAD_RACE_MARKERS)]


@contextlib.contextmanager
def running_operator(
    cluster: Any,
    namespace: str,
    workdir: Path,
    *,
    resync: str = "3s",
    gie: bool = False,
    env: dict[str, str] | None = None,
) -> Iterator[OperatorProcess]:
    """CRDs installed, `namespace` ready, the operator watching it; torn down (and its log checked for
    tracebacks) afterwards."""
    install_crds(cluster, gie=gie)
    cluster.ensure_namespace(namespace)
    op = OperatorProcess(cluster, namespace, workdir, resync=resync, env=env)
    try:
        op.start()  # inside the try: an operator too slow to answer is stopped, not left running
        yield op
    finally:
        op.stop()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    assert not op.tracebacks(), op.tracebacks()[-4000:]
    assert not op.thread_races(), op.thread_races()[:20]
