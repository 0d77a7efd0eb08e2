"""autoscaling.mode external end to end: an outside autoscaler (here `kubectl scale`, as an HPA or
KEDA would) owns each node pool Deployment's replicas while the operator keeps moving splits.

In order: a pool runs 2 H200 replicas in semipd mode; switched to external, it keeps 2 (server-side
apply would otherwise drop the released field to the default 1); `kubectl scale` to 1 sticks across
reconciles (semipd mode would restore its minimum of 2) and status reports it; load rises toward the
TTFT SLO and the split still moves, with no replica decision; switched back to semipd, the operator
owns replicas again (back to its minimum) without a rollout (same ReplicaSet, same pods kept).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.fleet_load import LoadDriver, PoissonArrivals
from e2e.harness import wait_until
from e2e.operator_process import OperatorProcess, running_operator
from e2e.poolstatus import pool_decisions

pytestmark = pytest.mark.e2e

NS = "external-e2e"
POOL = "ext"
DEPLOYMENT = f"{POOL}-h200"
CRD = "inferencepools.semipd.io"
RESYNC_S = 3.0
RESULTS_LOG = Path("/tmp") / "semipd-external-e2e-results.json"

MANIFEST = {
    "apiVersion": "semipd.io/v1alpha1",
    "kind": "InferencePool",
    "metadata": {"name": POOL},
    "spec": {
        "model": {"name": "llama-3-8b", "source": "hf://meta-llama/Llama-3.1-8B-Instruct", "profile": "llama-3-8b"},
        "engine": {"kind": "sim", "args": ["--load-time", "3"]},
        "nodePools": [
            {"name": "h200", "accelerator": "nvidia", "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"},
             "minReplicas": 2, "maxReplicas": 4, "costPerHour": 10},
        ],
        "semiPD": {"initialPrefillPercent": 30, "minPrefillPercent": 20, "maxPrefillPercent": 90, "stepPercent": 20},
        "slo": {"ttftP99": "1s", "itlP99": "60ms", "window": "15s"},
        "autoscaling": {"mode": "semipd", "interval": "5s", "scaleDownStabilization": "40s"},
    },
}  # fmt: skip


def get_json(cluster: Any, *args: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(cluster.kubectl("get", *args, "-n", NS, "-o", "json").stdout)
    return doc


def pool(cluster: Any) -> dict[str, Any]:
    return get_json(cluster, CRD, POOL)


def deployment(cluster: Any) -> dict[str, Any]:
    return get_json(cluster, "deployment", DEPLOYMENT)


def spec_replicas(cluster: Any) -> int:
    return int(deployment(cluster)["spec"]["replicas"])


def status_of(cluster: Any) -> dict[str, Any]:
    (np,) = (pool(cluster).get("status") or {}).get("nodePools") or [{}]
    return dict(np)


def decisions(cluster: Any, action: str) -> list[dict[str, Any]]:
    return pool_decisions(pool(cluster), action)


def replica_sets(cluster: Any) -> set[str]:
    items = get_json(cluster, "replicasets", "-l", f"semipd.io/pool={POOL}")["items"]
    return {rs["metadata"]["name"] for rs in items}


def replicas_owners(cluster: Any) -> set[str]:
    fields = get_json(cluster, "deployment", DEPLOYMENT, "--show-managed-fields")["metadata"]["managedFields"]
    return {m["manager"] for m in fields if "f:replicas" in ((m.get("fieldsV1") or {}).get("f:spec") or {})}


def prefill_raised(cluster: Any) -> bool:
    """Every pod reports an applied split with more prefill than the manifest's initial 30 %."""
    splits = status_of(cluster).get("splits") or []
    return bool(splits) and all(s["prefillPercent"] > 30 for s in splits)


def set_mode(cluster: Any, mode: str) -> None:
    patch = json.dumps({"spec": {"autoscaling": {"mode": mode}}})
    cluster.kubectl("patch", CRD, POOL, "-n", NS, "--type=merge", "-p", patch)


def hold(seconds: float, check: Any, what: str) -> None:
    """`check()` stays true for `seconds` (several reconciles), polled once a second."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert check(), what
        time.sleep(1.0)


@pytest.fixture(scope="module")
def operator(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    with running_operator(cluster, NS, tmp_path_factory.mktemp("external"), resync=f"{RESYNC_S:.0f}s") as op:
        cluster.kubectl("apply", "-n", NS, "-f", "-", input=yaml.safe_dump(MANIFEST))
        wait_until(lambda: status_of(cluster).get("readyReplicas") == 2, timeout=120, what="2 ready H200 replicas")
        yield op


def test_switching_to_external_keeps_the_replicas_running(cluster: Any, operator: OperatorProcess) -> None:
    set_mode(cluster, "external")
    wait_until(lambda: pool(cluster)["status"].get("observedGeneration") == pool(cluster)["metadata"]["generation"],
               timeout=30, what="the mode change observed")  # fmt: skip
    hold(4 * RESYNC_S, lambda: spec_replicas(cluster) == 2, "replicas kept at 2 while the operator lets go of them")
    assert "semipd-operator-replicas-handover" in replicas_owners(cluster)


def test_kubectl_scale_sticks_and_splits_still_move(cluster: Any, operator: OperatorProcess) -> None:
    sets = replica_sets(cluster)
    cluster.kubectl("scale", "deployment", DEPLOYMENT, "-n", NS, "--replicas=1")
    wait_until(lambda: status_of(cluster).get("readyReplicas") == 1 and status_of(cluster).get("replicas") == 1,
               timeout=60, what="scaled to 1")  # fmt: skip
    hold(4 * RESYNC_S, lambda: spec_replicas(cluster) == 1, "kubectl scale reverted")
    assert "semipd-operator" not in replicas_owners(cluster)
    assert status_of(cluster)["desiredReplicas"] == 1  # status reports the replicas it sees
    before = {d["time"] for d in decisions(cluster, "SplitChange")}
    load = LoadDriver(cluster.core(), NS, POOL, PoissonArrivals(), model="llama-3-8b", slice_s=2.0)
    with load.running(RESULTS_LOG):
        assert isinstance(load.arrivals, PoissonArrivals)
        load.arrivals.rate = 6.0
        # The planner may move before the breach shows (RisingLoad, or BurstReserve while ITL has room at a
        # burst) or after it (TTFTOverSLO); any reason but ITL proves the split still moves when an outside
        # autoscaler owns the replicas, and the applied split must give prefill more than the initial 30 %.
        wait_until(lambda: [d for d in decisions(cluster, "SplitChange")
                            if d["time"] not in before and d["reason"] != "ITLOverSLO"] and prefill_raised(cluster),
                   timeout=150, what="a split change for the rising load in external mode",
                   on_timeout=lambda: json.dumps({"decisions": pool_decisions(pool(cluster)),
                                                  "nodePools": pool(cluster)["status"].get("nodePools")}))  # fmt: skip
        load.arrivals.rate = 0.0
    assert spec_replicas(cluster) == 1
    assert decisions(cluster, "ScaleOut") == []
    assert replica_sets(cluster) == sets
    assert load.failures() == []


def test_back_to_semipd_takes_replicas_without_a_rollout(cluster: Any, operator: OperatorProcess) -> None:
    sets = replica_sets(cluster)
    (pod_before,) = [p["metadata"]["name"] for p in get_json(cluster, "pods", "-l", f"semipd.io/pool={POOL}")["items"]
                     if not p["metadata"].get("deletionTimestamp")]  # fmt: skip
    set_mode(cluster, "semipd")
    wait_until(lambda: spec_replicas(cluster) == 2, timeout=60, what="the operator restores its minimum of 2")
    assert "semipd-operator" in replicas_owners(cluster)
    wait_until(lambda: status_of(cluster).get("readyReplicas") == 2, timeout=90, what="2 ready again")
    assert replica_sets(cluster) == sets, "a new ReplicaSet: the mode switch rolled the pods"
    pods = [p["metadata"]["name"] for p in get_json(cluster, "pods", "-l", f"semipd.io/pool={POOL}")["items"]]
    assert pod_before in pods
