"""CLI: `python -m e2e.harness up|down|status|kubeconfig` (run from the repository root).

`up` prints the admin kubeconfig path on stdout (progress goes to stderr), so
`kubectl --kubeconfig "$(python -m e2e.harness up)" get nodes` works.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .cluster import Cluster


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["kubelet"]:
        from . import kubelet

        kubelet.main(args[1:])
        return 0
    parser = argparse.ArgumentParser(prog="python -m e2e.harness")
    parser.add_argument("command", choices=["up", "down", "status", "kubeconfig"])
    parser.add_argument(
        "--run-dir", type=Path, default=None, help="cluster run directory (default: $SEMIPD_RUN_DIR or .run/cluster)"
    )
    parser.add_argument("--no-reuse", action="store_true", help="up: always start a fresh cluster")
    ns = parser.parse_args(args)
    cluster = Cluster(ns.run_dir)
    if ns.command == "up":
        t0 = time.monotonic()
        reused = cluster.up(reuse=not ns.no_reuse)
        print(f"[harness] {'reused' if reused else 'started'} in {time.monotonic() - t0:.1f}s", file=sys.stderr)
        print(cluster.kubeconfig)
    elif ns.command == "down":
        if not cluster.state:
            print("[harness] no cluster state: nothing to stop", file=sys.stderr)
        cluster.down()
    elif ns.command == "status":
        st = cluster.status()
        print(json.dumps(st, indent=2))
        return 0 if st["running"] else 1
    elif ns.command == "kubeconfig":
        print(cluster.kubeconfig)
    return 0


if __name__ == "__main__":
    sys.exit(main())
