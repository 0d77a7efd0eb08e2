"""Host-wide loopback address slices: each running cluster owns one 127.B.0.0/16.

Pods of every cluster on this machine bind real loopback addresses, so two clusters must never
hand out the same pod IPs (two agents both binding 127.x.0.1:9090 would collide). A cluster
leases a slice in a shared directory under a lock; a lease is live while any process carrying
its cluster's run marker (or the process that took it, while it starts the cluster) is alive,
so the slices of crashed clusters are reclaimed.

Inside a slice: pod CIDRs 127.B.N.0/24 (N = 0..253), the kwok fallback pool 127.B.254.0/24,
node InternalIPs 127.B.255.x.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from . import processes
from .config import RUN_MARKER_ENV

FIRST_OCTET, LAST_OCTET = 10, 250
"""Second octets handed out (a lone cluster gets 127.10.0.0/16); below 10 stays free for
127.0.0.1 and hand-made test setups."""


def lease_dir() -> Path:
    return Path(os.environ.get("SEMIPD_ADDRESS_LEASES", "/tmp/semipd-e2e-address-leases"))


def slice_network(octet: int) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(f"127.{octet}.0.0/16")


def pod_cidrs(octet: int) -> list[str]:
    return [f"127.{octet}.{n}.0/24" for n in range(254)]


def fallback_cidr(octet: int) -> str:
    return f"127.{octet}.254.0/24"


def node_ip(octet: int, index: int) -> str:
    return f"127.{octet}.255.{index + 1}"


def choose_octet(leased: Iterable[int], busy: Iterable[int]) -> int:
    """Lowest octet neither leased by a live cluster nor with a socket bound in its /16."""
    taken = set(leased) | set(busy)
    for octet in range(FIRST_OCTET, LAST_OCTET + 1):
        if octet not in taken:
            return octet
    raise RuntimeError(f"no free 127.B.0.0/16 slice left ({len(taken)} taken)")


def parse_proc_net_tcp(text: str) -> set[int]:
    """Second octets of 127.x local addresses in a /proc/net/tcp dump (IPv4, little-endian hex)."""
    octets = set()
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 2:
            continue
        addr_hex = fields[1].split(":")[0]
        raw = bytes.fromhex(addr_hex)[::-1]
        if raw[0] == 127:
            octets.add(raw[1])
    return octets


def busy_octets() -> set[int]:
    try:
        return parse_proc_net_tcp(Path("/proc/net/tcp").read_text())
    except OSError:
        return set()


@contextlib.contextmanager
def _locked() -> Iterator[Path]:
    d = lease_dir()
    d.mkdir(parents=True, exist_ok=True)
    with (d / ".lock").open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield d
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _live_leases(d: Path, *, exclude_run: str) -> set[int]:
    live = set()
    for path in d.glob("127.*"):
        try:
            lease = json.loads(path.read_text())
            octet = int(path.name.split(".")[1])
        except (OSError, ValueError):
            continue
        if lease["run_id"] == exclude_run:
            continue
        if processes.alive(int(lease["pid"])) or processes.pids_with_marker(RUN_MARKER_ENV, lease["run_id"]):
            live.add(octet)
        else:
            path.unlink(missing_ok=True)  # its cluster is gone
    return live


def acquire(run_id: str, run_dir: Path) -> int:
    """Lease a slice for this cluster (call before starting its first process)."""
    with _locked() as d:
        octet = choose_octet(_live_leases(d, exclude_run=run_id), busy_octets())
        lease = {"run_id": run_id, "run_dir": str(run_dir), "pid": os.getpid()}
        (d / f"127.{octet}").write_text(json.dumps(lease))
        return octet


def release(octet: int, run_id: str) -> None:
    with _locked() as d:
        path = d / f"127.{octet}"
        with contextlib.suppress(OSError, ValueError, KeyError):
            if json.loads(path.read_text())["run_id"] == run_id:
                path.unlink()
