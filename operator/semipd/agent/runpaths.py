"""File names inside the pod's run directory shared by the agent and the engines it supervises.

The decode owner listens on unix sockets here (never on TCP: many pods share one loopback on the
test host); the simulated engine imports these names so both sides agree on one definition.
"""

from __future__ import annotations

import os

CONTROL_SOCKET = "control.sock"
IPC_SOCKET = "ipc.sock"
PIDS_FILE = "agent-pids.json"
RUN_DIR_ENV = "SEMIPD_RUN_DIR"

# sun_path is 108 bytes on Linux including the terminating NUL.
MAX_SOCKET_PATH = 107


def control_socket(run_dir: str) -> str:
    return _socket_path(run_dir, CONTROL_SOCKET)


def ipc_socket(run_dir: str) -> str:
    return _socket_path(run_dir, IPC_SOCKET)


def pids_file(run_dir: str) -> str:
    return os.path.join(run_dir, PIDS_FILE)


def _socket_path(run_dir: str, name: str) -> str:
    path = os.path.join(run_dir, name)
    if len(path.encode()) > MAX_SOCKET_PATH:
        raise ValueError(f"unix socket path {path!r} exceeds {MAX_SOCKET_PATH} bytes; use a shorter --run-dir")
    return path
