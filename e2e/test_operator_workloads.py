"""An InferencePool reconciled into running semi-PD workloads on the real control plane.

One pool goes through its life in order: created on GPU + Ascend kwok nodes (agents and simulated
engines run by the local kubelet, scraped by Prometheus), re-applied (no writes), drifted by hand
(reverted), scaled, rolled, broken (pods untouched), shrunk (a node pool pruned), the operator
killed mid-rollout (converges), and deleted (garbage-collected).
"""

from __future__ import annotations

import copy
import ipaddress
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from e2e.harness import wait_until
from e2e.harness.kube import condition
from e2e.operator_process import OperatorProcess, running_operator

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
NS = "workloads-e2e"
POOL = "demo"
RESYNC = 3.0
OWNED_KINDS = "deployments,services,poddisruptionbudgets,inferencepools.inference.networking.k8s.io,secrets"


def manifest() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "sim-mixed-gpu-ascend.yaml").read_text())
    doc["metadata"]["name"] = POOL
    doc["spec"]["engine"]["args"] = ["--speedup", "50"]  # 21 model-seconds of weight loading → 0.4 s
    doc["spec"]["nodePools"][1]["minReplicas"] = 1
    doc["spec"]["slo"]["window"] = "10s"  # observations of earlier requests age out quickly
    return doc


def kubectl_json(cluster: Any, *args: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(cluster.kubectl(*args, "-n", NS, "-o", "json").stdout)
    return out


def apply(cluster: Any, doc: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", NS, "-f", "-", input=yaml.safe_dump(doc))


def pool(cluster: Any) -> dict[str, Any]:
    return kubectl_json(cluster, "get", "inferencepools.semipd.io", POOL)


def engine_pods(cluster: Any, node_pool: str | None = None) -> list[dict[str, Any]]:
    selector = f"semipd.io/pool={POOL}" + (f",semipd.io/node-pool={node_pool}" if node_pool else "")
    items: list[dict[str, Any]] = kubectl_json(cluster, "get", "pods", "-l", selector)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def ready(pod: dict[str, Any]) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


def wait_ready(cluster: Any, expect: dict[str, int], timeout: float = 120) -> dict[str, Any]:
    """Until the pool is Ready with exactly `expect` ready replicas per node pool and status caught up."""

    def probe() -> dict[str, Any] | None:
        obj = pool(cluster)
        status = obj.get("status") or {}
        counts = {p["name"]: p["readyReplicas"] for p in status.get("nodePools", [])}
        desired = {p["name"]: p["desiredReplicas"] for p in status.get("nodePools", [])}
        ok = (
            condition(obj, "Ready").get("status") == "True"
            and condition(obj, "Progressing").get("status") == "False"
            and status.get("observedGeneration") == obj["metadata"]["generation"]
            and counts == expect
            and desired == expect
        )
        return obj if ok else None

    return wait_until(probe, timeout=timeout, what=f"pool Ready with {expect}")


def owned_versions(cluster: Any) -> dict[str, str]:
    items = kubectl_json(cluster, "get", OWNED_KINDS, "-l", f"semipd.io/pool={POOL}")["items"]
    out = {f"{i['kind']}/{i['metadata']['name']}": i["metadata"]["resourceVersion"] for i in items}
    out["pool"] = pool(cluster)["metadata"]["resourceVersion"]
    return out


@pytest.fixture(scope="module")
def operator(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    workdir = tmp_path_factory.mktemp("operator")
    with running_operator(cluster, NS, workdir, resync=f"{RESYNC:.0f}s", gie=True) as op:
        yield op


def test_mixed_pool_runs_on_the_right_nodes(cluster: Any, operator: OperatorProcess) -> None:
    apply(cluster, manifest())
    obj = wait_ready(cluster, {"h200": 1, "ascend": 1})
    for node_pool, prefix in (("h200", "gpu-h200-"), ("ascend", "ascend-910b-")):
        (pod,) = engine_pods(cluster, node_pool)
        assert pod["spec"]["nodeName"].startswith(prefix), pod["spec"]["nodeName"]
        cidr = cluster.core().read_node(pod["spec"]["nodeName"]).spec.pod_cidr
        assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(cidr)
        assert ipaddress.ip_address(pod["status"]["podIP"]).is_loopback
        assert pod["metadata"]["labels"]["llm-d.ai/role"] == "prefill-decode"
        rsp = httpx.post(
            f"http://{pod['status']['podIP']}:8000/v1/completions",
            json={"model": "llama-3-8b", "prompt": "hello " * 32, "max_tokens": 8, "ignore_eos": True},
            timeout=30,
        )
        assert rsp.status_code == 200, rsp.text
        assert rsp.json()["usage"]["completion_tokens"] == 8
    splits = {p["name"]: p["splits"] for p in obj["status"]["nodePools"]}
    assert splits["h200"][0]["prefillPercent"] == 50
    assert splits["h200"][0]["decodePercent"] == 50  # the default start
    table = cluster.kubectl("get", "sipool", POOL, "-n", NS).stdout
    for cell in ("2/2", "50:50", "True"):
        assert cell in table, table
    gie = kubectl_json(cluster, "get", "inferencepools.inference.networking.k8s.io")["items"]
    assert sorted(g["metadata"]["name"] for g in gie) == ["demo-ascend", "demo-nvidia"]
    assert all("parents" not in (g.get("status") or {}) for g in gie)


def test_prometheus_scrapes_the_engines(cluster: Any, operator: OperatorProcess) -> None:
    pods = {p["metadata"]["name"] for p in engine_pods(cluster)}

    def scraped() -> bool:
        result = cluster.prometheus_query(f'up{{namespace="{NS}"}} == 1')
        return {r["metric"].get("pod") for r in result} >= pods

    wait_until(scraped, timeout=60, what="Prometheus scraping both engine pods")
    assert cluster.prometheus_query(f'sglang:num_running_reqs{{namespace="{NS}"}}')


def test_reapplying_the_same_manifest_writes_nothing(cluster: Any, operator: OperatorProcess) -> None:
    # Status follows observations; wait until nothing is left to observe (idle, window passed).
    def stable() -> dict[str, str] | None:
        first = owned_versions(cluster)
        time.sleep(16)  # longer than the p99 window (10 s) plus one autoscaling interval (5 s)
        return first if owned_versions(cluster) == first else None

    before = wait_until(stable, timeout=90, what="status settled")
    writes = operator.metric("semipd_kube_api_requests_total")
    apply(cluster, manifest())
    time.sleep(2 * RESYNC + 1)
    assert owned_versions(cluster) == before
    assert operator.metric("semipd_kube_api_requests_total") == writes, "a steady reconcile made API requests"


def test_manual_drift_is_reverted(cluster: Any, operator: OperatorProcess) -> None:
    cluster.kubectl("scale", "deployment", f"{POOL}-h200", "-n", NS, "--replicas=3")
    cluster.kubectl("set", "image", f"deployment/{POOL}-ascend", "engine=evil:latest", "-n", NS)

    def reverted() -> bool:
        h200 = kubectl_json(cluster, "get", "deployment", f"{POOL}-h200")
        ascend = kubectl_json(cluster, "get", "deployment", f"{POOL}-ascend")
        image = ascend["spec"]["template"]["spec"]["containers"][0]["image"]
        return bool(h200["spec"]["replicas"] == 1 and image != "evil:latest")

    started = time.monotonic()
    wait_until(reverted, timeout=2 * RESYNC + 5, what="drift reverted")
    assert time.monotonic() - started <= RESYNC + 5
    wait_ready(cluster, {"h200": 1, "ascend": 1})


def test_raising_min_replicas_adds_pods(cluster: Any, operator: OperatorProcess) -> None:
    doc = manifest()
    doc["spec"]["nodePools"][0]["minReplicas"] = 2
    apply(cluster, doc)
    wait_ready(cluster, {"h200": 2, "ascend": 1})
    assert len(engine_pods(cluster, "h200")) == 2


def test_engine_args_roll_without_going_below_minimum(cluster: Any, operator: OperatorProcess) -> None:
    doc = manifest()
    doc["spec"]["nodePools"][0]["minReplicas"] = 2
    doc["spec"]["engine"]["args"] = ["--speedup", "50", "--max-running", "64"]
    old = {p["metadata"]["name"] for p in engine_pods(cluster, "h200")}
    apply(cluster, doc)
    lowest = 2
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        pods = engine_pods(cluster, "h200")
        lowest = min(lowest, sum(ready(p) for p in pods))
        names = {p["metadata"]["name"] for p in pods}
        if not names & old and len(pods) == 2 and all(ready(p) for p in pods):
            break
        time.sleep(0.3)
    else:
        raise AssertionError("rollout did not finish")
    assert lowest >= 2, f"ready h200 replicas dropped to {lowest} during the rollout"
    for pod in engine_pods(cluster):
        assert "--max-running" in pod["spec"]["containers"][0]["command"]
    wait_ready(cluster, {"h200": 2, "ascend": 1})


def test_bad_edit_leaves_running_pods_untouched(cluster: Any, operator: OperatorProcess) -> None:
    before = {p["metadata"]["uid"] for p in engine_pods(cluster)}
    generations = {
        d["metadata"]["name"]: d["metadata"]["generation"] for d in kubectl_json(cluster, "get", "deployments")["items"]
    }
    doc = manifest()
    doc["spec"]["nodePools"][0]["minReplicas"] = 2
    doc["spec"]["engine"]["args"] = ["--speedup", "50", "--max-running", "64"]
    bad = copy.deepcopy(doc)
    bad["spec"]["nodePools"][0]["acceleratorsPerReplica"] = 16
    apply(cluster, bad)
    wait_until(lambda: condition(pool(cluster), "InvalidSpec").get("status") == "True", timeout=30, what="InvalidSpec")
    time.sleep(RESYNC + 1)
    assert {p["metadata"]["uid"] for p in engine_pods(cluster)} == before
    after = {
        d["metadata"]["name"]: d["metadata"]["generation"] for d in kubectl_json(cluster, "get", "deployments")["items"]
    }
    assert after == generations
    apply(cluster, doc)
    wait_ready(cluster, {"h200": 2, "ascend": 1})


def test_removing_a_node_pool_prunes_its_objects(cluster: Any, operator: OperatorProcess) -> None:
    doc = manifest()
    doc["spec"]["nodePools"] = doc["spec"]["nodePools"][:1]
    doc["spec"]["nodePools"][0]["minReplicas"] = 2
    doc["spec"]["engine"]["args"] = ["--speedup", "50", "--max-running", "64"]
    apply(cluster, doc)

    def pruned() -> bool:
        names = set(owned_versions(cluster))
        return not any(n.endswith(f"{POOL}-ascend") for n in names) and not engine_pods(cluster, "ascend")

    wait_until(pruned, timeout=60, what="ascend workload, PDB and GIE pool pruned")
    wait_ready(cluster, {"h200": 2})


def test_operator_killed_mid_rollout_converges(cluster: Any, operator: OperatorProcess) -> None:
    doc = manifest()
    doc["spec"]["nodePools"] = doc["spec"]["nodePools"][:1]
    doc["spec"]["nodePools"][0]["minReplicas"] = 2
    doc["spec"]["engine"]["args"] = ["--speedup", "50", "--max-running", "32"]
    apply(cluster, doc)
    wait_until(
        lambda: any("32" in p["spec"]["containers"][0]["command"] for p in engine_pods(cluster, "h200")),
        timeout=60,
        what="rollout started",
    )
    operator.kill()
    operator.start()
    obj = wait_ready(cluster, {"h200": 2})
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
    names = sorted(owned_versions(cluster))
    assert names == sorted(
        [
            "pool",
            f"Deployment/{POOL}-h200",
            f"PodDisruptionBudget/{POOL}-h200",
            f"Service/{POOL}-engines",
            f"Secret/{POOL}-agent-token",
            f"InferencePool/{POOL}-nvidia",
        ]
    )
    for pod in engine_pods(cluster):
        cmd = pod["spec"]["containers"][0]["command"]
        assert cmd[cmd.index("--max-running") + 1] == "32"


def test_deleting_the_pool_garbage_collects_everything(cluster: Any, operator: OperatorProcess) -> None:
    cluster.kubectl("delete", "inferencepools.semipd.io", POOL, "-n", NS, "--wait=true", "--timeout=30s")

    def gone() -> bool:
        items = kubectl_json(cluster, "get", OWNED_KINDS, "-l", f"semipd.io/pool={POOL}")["items"]
        return not items and not engine_pods(cluster)

    wait_until(gone, timeout=90, what="owned objects garbage-collected")
