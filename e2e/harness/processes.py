"""Starting, finding and stopping the harness's background processes.

Each process gets its own session (so a signal to its process group reaches its children) and
the run-marker variable in its environment (so a sweep of /proc finds anything that escaped its
group). Nothing here kills by name.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


class Fatal(RuntimeError):
    """Raised by a probe to abort a wait at once (e.g. the awaited process died)."""


class Timeout(AssertionError):
    """A bounded wait ran out; the message says what was awaited and what was last seen."""


def wait_until(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    interval: float = 0.2,
    what: str,
    on_timeout: Callable[[], str] | None = None,
) -> T:
    """Poll `probe` until it returns something truthy; raise Timeout after `timeout` seconds.

    Exceptions from the probe count as "not yet" (the last one is reported on timeout), except
    `Fatal`, which propagates at once.
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            result = probe()
            if result:
                return result
        except Fatal:
            raise
        except Exception as exc:
            last_error = exc
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            extra = f"\n{on_timeout()}" if on_timeout else ""
            raise Timeout(f"timed out after {timeout:.0f}s waiting for {what}{detail}{extra}")
        time.sleep(interval)


def free_ports(count: int) -> list[int]:
    """Distinct currently-free TCP ports on 127.0.0.1 (held open together so they differ)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def spawn(
    argv: Sequence[str],
    *,
    log: Path,
    env: Mapping[str, str],
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start a detached process in its own session, stdout+stderr appended to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
        )


def alive(pid: int) -> bool:
    """True if `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in (b"Z", b"X")


def environ_of(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read()
    except OSError:
        return b""


def has_marker(pid: int, name: str, value: str) -> bool:
    return f"{name}={value}".encode() in environ_of(pid).split(b"\0")


def pids_with_markers(markers: Mapping[str, str]) -> list[int]:
    """Every live process (but this one) whose initial environment has all NAME=VALUE pairs."""
    needles = {f"{k}={v}".encode() for k, v in markers.items()}
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        pid = int(entry)
        if needles <= set(environ_of(pid).split(b"\0")) and alive(pid):
            found.append(pid)
    return found


def pids_with_marker(name: str, value: str) -> list[int]:
    return pids_with_markers({name: value})


def signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def signal_pid(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def reap(pids: Iterable[int]) -> None:
    """Collect exit statuses of any of `pids` that are our children (avoids zombies)."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


def terminate_groups(pgids: Sequence[int], *, grace: float) -> list[int]:
    """SIGTERM each process group, wait up to `grace` s, SIGKILL the rest. Returns groups killed."""
    for pgid in pgids:
        signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        reap(pgids)
        if not any(alive(p) for p in pgids):
            return []
        time.sleep(0.1)
    stubborn = [p for p in pgids if alive(p)]
    for pgid in stubborn:
        signal_group(pgid, signal.SIGKILL)
    reap(pgids)
    return stubborn


def kill_marked(name: str, value: str, *, grace: float) -> list[int]:
    """SIGTERM, then SIGKILL after `grace`, every process carrying the marker, and wait (up to
    5 s more) until they are gone, so their sockets are closed. Returns those found."""
    found = pids_with_marker(name, value)
    for pid in found:
        signal_pid(pid, signal.SIGTERM)
    wait_gone(found, grace)
    for pid in found:
        if alive(pid):
            signal_pid(pid, signal.SIGKILL)
    wait_gone(found, 5.0)
    return found


def wait_gone(pids: Sequence[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        reap(pids)
        if not any(alive(p) for p in pids) or time.monotonic() >= deadline:
            return
        time.sleep(0.05)


def rss_kib(pid: int) -> int | None:
    """Resident set size of one process in KiB (None if gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return 0
