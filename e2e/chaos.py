"""Shared pieces of the chaos e2e tests: a one-node-pool simulated pool, its owned objects, an
operator started for a namespace, and the figures file (`<run dir>/chaos-figures.json`)."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from e2e.harness import wait_until
from e2e.operator_process import THREAD_RACE_MARKERS, OperatorProcess, install_crds

ROOT = Path(__file__).resolve().parents[1]


class ChaosPool:
    """One InferencePool (the simulated example, h200 node pool only) in its own namespace."""

    def __init__(self, cluster: Any, namespace: str, name: str) -> None:
        self.cluster, self.ns, self.name = cluster, namespace, name
        self.stages: dict[str, float] = {}
        """Seconds into the last `wait_replicas` at which each step of its rollout was first seen."""

    def manifest(self, replicas: int, args: list[str] | None = None) -> dict[str, Any]:
        doc: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "sim-mixed-gpu-ascend.yaml").read_text())
        doc["metadata"] = {"name": self.name, "namespace": self.ns}
        doc["spec"]["engine"]["args"] = args if args is not None else ["--speedup", "50"]
        doc["spec"]["nodePools"] = doc["spec"]["nodePools"][:1]
        doc["spec"]["nodePools"][0]["minReplicas"] = replicas
        return doc

    def apply(self, replicas: int, args: list[str] | None = None) -> None:
        self.cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(self.manifest(replicas, args)))

    def get(self, *args: str) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(self.cluster.kubectl(*args, "-n", self.ns, "-o", "json").stdout)
        return out

    def pool(self) -> dict[str, Any]:
        return self.get("get", "inferencepools.semipd.io", self.name)

    def condition(self, type_: str) -> dict[str, Any]:
        conds = {c["type"]: c for c in (self.pool().get("status") or {}).get("conditions", [])}
        return conds.get(type_, {})

    def deployment(self) -> dict[str, Any]:
        return self.get("get", "deployment", f"{self.name}-h200")

    def pods(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.get("get", "pods", "-l", f"semipd.io/pool={self.name}")["items"]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    def owned(self) -> list[str]:
        kinds = "deployments,services,poddisruptionbudgets,secrets"
        items = self.get("get", kinds, "-l", f"semipd.io/pool={self.name}")["items"]
        return sorted(f"{i['kind']}/{i['metadata']['name']}" for i in items)

    def expected(self) -> list[str]:
        n = self.name
        return sorted([f"Deployment/{n}-h200", f"PodDisruptionBudget/{n}-h200", f"Service/{n}-engines",
                       f"Secret/{n}-agent-token"])  # fmt: skip

    def ready_replicas(self) -> int:
        return _ready(self.deployment())

    def wait_replicas(self, n: int, timeout: float = 120) -> float:
        """Seconds until the Deployment has `n` ready replicas; `self.stages` says when the operator
        scaled it, when the controller manager had made the pods and when they became ready."""
        t0 = time.monotonic()
        self.stages = {}

        def reached() -> bool:
            dep = self.deployment()
            status, at = dep.get("status") or {}, time.monotonic() - t0
            if dep["spec"].get("replicas") == n:
                self.stages.setdefault("deployment_scaled_s", at)
            if status.get("replicas") == n and status.get("observedGeneration") == dep["metadata"]["generation"]:
                self.stages.setdefault("replicas_made_s", at)
            if _ready(dep) == n:
                self.stages.setdefault("replicas_ready_s", at)
                return True
            return False

        wait_until(reached, timeout=timeout, what=f"{n} ready engine replicas", on_timeout=self.diagnose)
        return time.monotonic() - t0

    def rollout_figures(self) -> dict[str, float]:
        """The last rollout's steps, named for a chaos figures entry."""
        return {f"spec_change_{k}": v for k, v in self.stages.items()}

    def diagnose(self) -> str:
        """Where a rollout stands, for a timeout's message: the Deployment, each pod, recent Events."""
        dep = self.cluster.kubectl("get", "deployment,replicaset", "-n", self.ns, "-o", "wide", check=False).stdout
        pods = self.cluster.kubectl("get", "pods", "-n", self.ns, "-o", "wide", check=False).stdout
        events = self.cluster.kubectl("get", "events", "-n", self.ns, "--sort-by=.lastTimestamp", check=False).stdout
        tail = "\n".join(events.splitlines()[-25:])
        return f"stages reached: {self.stages}\nobjects:\n{dep}\npods:\n{pods}\nrecent events:\n{tail}"


def _ready(deployment: dict[str, Any]) -> int:
    return int((deployment.get("status") or {}).get("readyReplicas") or 0)


@contextlib.contextmanager
def chaos_operator(
    cluster: Any, namespace: str, workdir: Path, env: dict[str, str] | None = None
) -> Iterator[OperatorProcess]:
    """CRDs, the namespace and an operator watching it; afterwards its log must show no thread races."""
    install_crds(cluster, gie=False)
    cluster.ensure_namespace(namespace)
    op = OperatorProcess(cluster, namespace, workdir, resync="3s", env=env)
    op.start()
    try:
        yield op
    finally:
        op.stop()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    races = [line for line in op.log.read_text().splitlines() if any(m in line for m in THREAD_RACE_MARKERS)]
    assert not races, races[:20]


def record(cluster: Any, name: str, figures: dict[str, float]) -> None:
    path = cluster.paths.root / "chaos-figures.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data[name] = {k: round(v, 2) for k, v in figures.items()}
    path.write_text(json.dumps(data, indent=2, sort_keys=True))
    print(f"\n[chaos] {name}: {data[name]}")
