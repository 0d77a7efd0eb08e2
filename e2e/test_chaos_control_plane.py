"""Chaos on the real control plane: the apiserver and etcd go away under a running operator.

With the apiserver stopped the operator's liveness must fail within staleAfter plus Kopf's
probe-result cache (10 s, not configurable) plus one poll; once it is back, liveness recovers on its
own and reconciles resume (a spec change made afterwards is applied). etcd going away is seen the
same way (the heartbeat's list reads through to etcd). After each fault the pool's objects are
exactly the expected set: nothing duplicated, nothing orphaned. Figures go to
`<run dir>/chaos-figures.json` and the test output.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.harness import wait_until
from e2e.operator_process import THREAD_RACE_MARKERS, OperatorProcess, install_crds

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
NS = "chaos-e2e"
POOL = "chaos"
STALE_AFTER = 10.0
KOPF_PROBE_CACHE = 10.0
"""Kopf re-runs probe handlers at most every 10 s and serves the cached result in between."""
POLL = 0.5


def manifest(replicas: int) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "sim-mixed-gpu-ascend.yaml").read_text())
    doc["metadata"] = {"name": POOL, "namespace": NS}
    doc["spec"]["engine"]["args"] = ["--speedup", "50"]
    doc["spec"]["nodePools"] = doc["spec"]["nodePools"][:1]
    doc["spec"]["nodePools"][0]["minReplicas"] = replicas
    return doc


def kubectl_json(cluster: Any, *args: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(cluster.kubectl(*args, "-n", NS, "-o", "json").stdout)
    return out


def owned(cluster: Any) -> list[str]:
    kinds = "deployments,replicasets,services,poddisruptionbudgets,secrets"
    items = kubectl_json(cluster, "get", kinds, "-l", f"semipd.io/pool={POOL}")["items"]
    return sorted(f"{i['kind']}/{i['metadata']['name']}" for i in items if i["kind"] != "ReplicaSet")


def ready_replicas(cluster: Any) -> int:
    dep = kubectl_json(cluster, "get", "deployment", f"{POOL}-h200")
    return int((dep.get("status") or {}).get("readyReplicas") or 0)


def wait_replicas(cluster: Any, n: int, timeout: float = 120) -> float:
    t0 = time.monotonic()
    wait_until(lambda: ready_replicas(cluster) == n, timeout=timeout, what=f"{n} ready engine replicas")
    return time.monotonic() - t0


def record(cluster: Any, name: str, figures: dict[str, float]) -> None:
    path = cluster.paths.root / "chaos-figures.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data[name] = {k: round(v, 2) for k, v in figures.items()}
    path.write_text(json.dumps(data, indent=2, sort_keys=True))
    print(f"\n[chaos] {name}: {data[name]}")


EXPECTED = sorted(
    [
        f"Deployment/{POOL}-h200",
        f"PodDisruptionBudget/{POOL}-h200",
        f"Service/{POOL}-engines",
        f"Secret/{POOL}-agent-token",
    ]
)


@pytest.fixture(scope="module")
def operator(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    install_crds(cluster, gie=False)
    cluster.kubectl("create", "namespace", NS, check=False)
    wait_until(
        lambda: cluster.kubectl("get", "serviceaccount", "default", "-n", NS, check=False).returncode == 0,
        timeout=30,
        what="default ServiceAccount",
    )
    op = OperatorProcess(
        cluster, NS, tmp_path_factory.mktemp("chaos-operator"), resync="3s", env={"SEMIPD_STALE_AFTER": "10s"}
    )
    op.start()
    try:
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest(1)))
        wait_replicas(cluster, 1)
        wait_until(op.live, timeout=30, what="operator live")
        yield op
    finally:
        for name in ("etcd", "kube-apiserver"):  # a failed test must not leave the cluster broken
            if name in cluster.state.get("stopped", []):
                cluster.start_component(name)
        op.stop()
        cluster.kubectl("delete", "namespace", NS, "--wait=false", check=False)
    races = [line for line in op.log.read_text().splitlines() if any(m in line for m in THREAD_RACE_MARKERS)]
    assert not races, races[:20]


def outage(cluster: Any, op: OperatorProcess, component: str, replicas_after: int) -> dict[str, float]:
    assert op.live()
    t0 = time.monotonic()
    cluster.stop_component(component, kill=component == "etcd")
    try:
        bound = STALE_AFTER + KOPF_PROBE_CACHE + 20
        wait_until(lambda: not op.live(), timeout=bound, interval=POLL, what="probe fails")
        detected = time.monotonic() - t0
        time.sleep(2)
        assert not op.live()  # stays failed while the component is down
    finally:
        healthy_after = cluster.start_component(component)
    t1 = time.monotonic()
    wait_until(op.live, timeout=STALE_AFTER + KOPF_PROBE_CACHE + 30, interval=POLL, what="probe recovers")
    live_again = time.monotonic() - t1
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest(replicas_after)))
    converged = wait_replicas(cluster, replicas_after)
    assert owned(cluster) == EXPECTED  # nothing duplicated or orphaned
    deps = kubectl_json(cluster, "get", "deployments", "-l", f"semipd.io/pool={POOL}")["items"]
    assert [d["spec"]["replicas"] for d in deps] == [replicas_after]
    return {
        "probe_failed_after_s": detected,
        "component_healthy_after_restart_s": healthy_after,
        "probe_recovered_after_s": live_again,
        "spec_change_converged_after_s": converged,
        "duplicated_or_orphaned_objects": float(len(owned(cluster)) - len(EXPECTED)),
    }


def test_apiserver_outage_fails_liveness_and_recovers(cluster: Any, operator: OperatorProcess) -> None:
    figures = outage(cluster, operator, "kube-apiserver", replicas_after=2)
    record(cluster, "apiserver_restart", figures)
    assert figures["probe_failed_after_s"] <= STALE_AFTER + KOPF_PROBE_CACHE + 2 * POLL + 2


def test_etcd_outage_fails_liveness_and_recovers(cluster: Any, operator: OperatorProcess) -> None:
    figures = outage(cluster, operator, "etcd", replicas_after=1)
    record(cluster, "etcd_restart", figures)
    assert figures["probe_failed_after_s"] <= STALE_AFTER + KOPF_PROBE_CACHE + 2 * POLL + 2 + 5  # + list timeout
