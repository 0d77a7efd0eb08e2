"""Run one pod's processes locally (agent wrapping the simulated engine) on a loopback address.

Component tests and benchmarks start real processes through this: a random 127.x.y.z address, free
ports, a per-pod run dir and token file, and cleanup that kills every process the agent recorded.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from semipd.agent.runpaths import pids_file


def loopback_host(rng: random.Random | None = None) -> str:
    """A random 127.a.b.c address (bindable without configuring an alias on Linux)."""
    r = rng or random.Random()
    return f"127.{r.randint(1, 254)}.{r.randint(0, 254)}.{r.randint(1, 254)}"


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class PodOptions:
    driver: str = "sim"
    hardware: str = "h200"
    model: str = "llama-3-8b"
    speedup: float = 20.0
    prefill_percent: int | None = 50
    decode_percent: int | None = 100
    engine_args: Sequence[str] = ()
    agent_args: Sequence[str] = ()
    env: dict[str, str] = field(default_factory=dict)
    agent_command: Sequence[str] | None = None
    engine_command: Sequence[str] | None = None
    load_time: float = 0.0


class LocalPod:
    def __init__(self, root: Path, options: PodOptions | None = None, host: str | None = None) -> None:
        self.options = options or PodOptions()
        self.root = Path(root)
        self.host = host or loopback_host()
        self.engine_port = free_port(self.host)
        self.admin_port = free_port(self.host)
        self.run_dir = self.root / "run"
        self.token = f"tok-{random.getrandbits(64):016x}"
        self.token_file = self.root / "token"
        self.log_path = self.root / "agent.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None

    @property
    def engine_url(self) -> str:
        return f"http://{self.host}:{self.engine_port}"

    @property
    def admin_url(self) -> str:
        return f"http://{self.host}:{self.admin_port}"

    def engine_argv(self) -> list[str]:
        o = self.options
        base = list(o.engine_command or [sys.executable, "-m", "semipd.sim.engine"])
        return [
            *base,
            "--role", "decode-owner",
            "--host", self.host,
            "--port", str(self.engine_port),
            "--hardware", o.hardware,
            "--model", o.model,
            "--speedup", repr(o.speedup),
            "--load-time", repr(o.load_time),
            "--run-dir", str(self.run_dir),
            *o.engine_args,
        ]  # fmt: skip

    def agent_argv(self) -> list[str]:
        o = self.options
        argv = [
            *(o.agent_command or [sys.executable, "-m", "semipd.agent"]),
            "--driver", o.driver,
            "--admin-host", self.host,
            "--admin-port", str(self.admin_port),
            "--token-file", str(self.token_file),
            "--run-dir", str(self.run_dir),
        ]  # fmt: skip
        if o.prefill_percent is not None:
            argv += ["--prefill-percent", str(o.prefill_percent)]
        if o.decode_percent is not None:
            argv += ["--decode-percent", str(o.decode_percent)]
        return [*argv, *o.agent_args, "--", *self.engine_argv()]

    def start(self, timeout: float = 60.0, wait_ready: bool = True) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.token_file.write_text(self.token + "\n")
        env = dict(os.environ)
        env.update(self.options.env)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(self.agent_argv(), env=env, stdout=self._log, stderr=subprocess.STDOUT)
        if wait_ready:
            self.wait_ready(timeout)

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"agent exited with {self.proc.returncode} during start-up:\n{self.log_tail()}")
            status, _ = self.admin("GET", "/readyz", auth=False)
            if status == 200:
                return
            time.sleep(0.05)
        raise TimeoutError(f"pod not ready within {timeout}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def admin(
        self,
        method: str,
        path: str,
        body: Any = None,
        auth: bool | str = True,
        raw: bytes | None = None,
        timeout: float = 120.0,
    ) -> tuple[int, Any]:
        """One admin API call; returns (status, parsed JSON or text). Connection errors give status 0."""
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(self.admin_url + path, data=data, method=method)
        if auth:
            req.add_header("Authorization", f"Bearer {self.token if auth is True else auth}")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, _decode(resp.read(), resp.headers.get("Content-Type", ""))
        except urllib.error.HTTPError as e:
            return e.code, _decode(e.read(), e.headers.get("Content-Type", ""))
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return 0, None

    def put_split(self, prefill: int | None = None, decode: int | None = None, wait: bool = True) -> tuple[int, Any]:
        body: dict[str, int] = {}
        if prefill is not None:
            body["prefillPercent"] = prefill
        if decode is not None:
            body["decodePercent"] = decode
        return self.admin("PUT", "/v1/split" + ("" if wait else "?wait=false"), body)

    def metrics_text(self) -> str:
        status, text = self.admin("GET", "/metrics")
        if status != 200:
            raise RuntimeError(f"agent /metrics answered {status}")
        return str(text)

    def engine_metrics_text(self) -> str:
        with urllib.request.urlopen(self.engine_url + "/metrics", timeout=10) as resp:
            return str(resp.read().decode())

    def pids(self) -> dict[str, Any]:
        try:
            doc: dict[str, Any] = json.loads(Path(pids_file(str(self.run_dir))).read_text())
            return doc
        except (OSError, ValueError):
            return {}

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM the agent and wait; then SIGKILL anything it left behind."""
        rc = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                rc = self.proc.wait(10)
        self.kill_leftovers()
        if self._log is not None:
            self._log.close()
            self._log = None
        return rc

    def kill_leftovers(self) -> list[int]:
        pids = self.pids()
        candidates = [pids.get("engine"), *(pids.get("workers") or {}).values()]
        killed = []
        for pid in candidates:
            if isinstance(pid, int) and _alive(pid):
                try:
                    os.killpg(pid, signal.SIGKILL)
                    killed.append(pid)
                except OSError:
                    pass
        return killed

    def __enter__(self) -> LocalPod:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _decode(body: bytes, content_type: str) -> Any:
    if "json" in content_type:
        return json.loads(body.decode() or "null")
    return body.decode(errors="replace")


class PodSet:
    """Several local pods under one directory, all stopped together (a test fixture's body)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.pods: list[LocalPod] = []

    def make(self, options: PodOptions | None = None, start: bool = True, timeout: float = 60.0) -> LocalPod:
        pod = LocalPod(self.root / f"pod{len(self.pods)}", options)
        self.pods.append(pod)
        if start:
            pod.start(timeout=timeout)
        return pod

    def close(self) -> None:
        for pod in self.pods:
            pod.stop(timeout=20)

    def __enter__(self) -> PodSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
