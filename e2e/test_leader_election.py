"""Leader election on the real control plane: two operator processes, one Lease.

Only the holder reconciles (the standby makes no API request of the pool's kind and no reconcile);
killing the leader by pid under client load hands the Lease to the standby within the lease duration
plus a retry; the new leader reconciles a spec change; no object is duplicated and no client request
is lost (engine pods do not depend on the operator being up).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.fleet_load import LoadDriver, PoissonArrivals
from e2e.harness import wait_until
from e2e.operator_process import OperatorProcess, install_crds
from e2e.poolstatus import condition, get_pool

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

NS = "leader-e2e"
POOL = "le"
LEASE = "semipd-operator"
LEASE_S, RENEW_S, RETRY_S = 6, 4, 1
RESULTS_LOG = Path("/tmp") / "semipd-leader-e2e-results.json"
ELECTION = {
    "SEMIPD_LEADER_ELECTION": "true",
    "SEMIPD_LEASE_NAMESPACE": NS,
    "SEMIPD_LEASE_NAME": LEASE,
    "SEMIPD_LEASE_DURATION": f"{LEASE_S}s",
    "SEMIPD_RENEW_DEADLINE": f"{RENEW_S}s",
    "SEMIPD_RETRY_PERIOD": f"{RETRY_S}s",
}


def manifest(replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "semipd.io/v1alpha1",
        "kind": "InferencePool",
        "metadata": {"name": POOL},
        "spec": {
            "model": {"name": "llama-3-8b", "source": "hf://meta-llama/Llama-3.1-8B-Instruct", "profile": "llama-3-8b"},
            "engine": {"kind": "sim", "args": ["--load-time", "1"]},
            "nodePools": [{"name": "h200", "accelerator": "nvidia", "costPerHour": 10,
                           "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"},
                           "minReplicas": replicas, "maxReplicas": replicas}],
            "slo": {"ttftP99": "2s", "itlP99": "100ms", "window": "15s"},
            "autoscaling": {"interval": "5s"},
        },
    }  # fmt: skip


def holder(cluster: Any) -> str:
    out = cluster.kubectl("get", "lease", LEASE, "-n", NS, "-o", "json", check=False)
    return str(json.loads(out.stdout)["spec"].get("holderIdentity") or "") if out.returncode == 0 else ""


def ready_replicas(cluster: Any) -> int:
    return sum(
        p.get("readyReplicas", 0) for p in (get_pool(cluster, NS, POOL).get("status") or {}).get("nodePools", [])
    )


def deployments(cluster: Any) -> list[str]:
    items = cluster.apps().list_namespaced_deployment(NS, label_selector=f"semipd.io/pool={POOL}").items
    return sorted(d.metadata.name for d in items)


@pytest.fixture(scope="module")
def operators(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[OperatorProcess]]:
    install_crds(cluster, gie=False)
    cluster.ensure_namespace(NS)
    key = secrets.token_hex(32)  # one token key, as the chart's Secret gives every replica
    ops = []
    for i in range(2):
        workdir = tmp_path_factory.mktemp(f"leader-{i}")
        (workdir / "token.key").write_text(key)
        ops.append(OperatorProcess(cluster, NS, workdir, env=ELECTION))
    try:
        for op in ops:
            op.start()
        yield ops
    finally:
        for op in ops:
            op.stop()
        cluster.kubectl("delete", "namespace", NS, "--wait=false", check=False)


def test_only_the_lease_holder_acts_and_the_standby_takes_over_when_it_dies(
    cluster: Any, operators: list[OperatorProcess]
) -> None:
    by_pid = {op.proc.pid: op for op in operators if op.proc is not None}
    wait_until(lambda: holder(cluster), timeout=60, what="a Lease holder")
    leader = by_pid[int(holder(cluster).rsplit("_", 1)[1])]
    (standby,) = [op for op in operators if op is not leader]
    cluster.kubectl("apply", "-n", NS, "-f", "-", input=yaml.safe_dump(manifest(1)))
    wait_until(lambda: condition(get_pool(cluster, NS, POOL), "Ready").get("status") == "True", timeout=180,
               what="pool Ready")  # fmt: skip
    assert leader.metric("semipd_leader") == 1
    assert standby.metric("semipd_leader") == 0
    assert standby.live(), "a standby must pass liveness, or the kubelet would restart it forever"
    assert standby.metric("semipd_reconcile_total") == 0
    assert standby.metric("semipd_kube_api_requests_total") == 0
    assert "standby" in standby.log.read_text()
    lease = json.loads(cluster.kubectl("get", "lease", LEASE, "-n", NS, "-o", "json").stdout)
    assert lease["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "semipd-operator"

    load = LoadDriver(cluster.core(), NS, POOL, PoissonArrivals(), model="llama-3-8b", slice_s=1.0)
    with load.running(RESULTS_LOG):
        assert isinstance(load.arrivals, PoissonArrivals)
        load.arrivals.rate = 3.0
        time.sleep(5)
        before = holder(cluster)
        leader.kill()
        killed = time.monotonic()
        wait_until(lambda: holder(cluster) not in ("", before), timeout=LEASE_S + 4 * RETRY_S + 20,
                   what="the standby holding the Lease")  # fmt: skip
        takeover_s = time.monotonic() - killed
        assert int(holder(cluster).rsplit("_", 1)[1]) == standby.proc.pid  # type: ignore[union-attr]
        # The new leader reconciles a change made after the old one died.
        cluster.kubectl("apply", "-n", NS, "-f", "-", input=yaml.safe_dump(manifest(2)))
        wait_until(lambda: ready_replicas(cluster) == 2, timeout=180, what="the new leader scaling to 2")
        load.arrivals.rate = 0.0
    print(f"takeover after SIGKILL: {takeover_s:.1f}s (lease {LEASE_S}s, retry {RETRY_S}s)")
    assert takeover_s <= LEASE_S + 4 * RETRY_S + 20
    assert standby.metric("semipd_leader") == 1
    assert deployments(cluster) == [f"{POOL}-h200"], "one Deployment per node pool, none duplicated"
    assert len(load.results) > 50
    assert load.failures() == []
    assert not standby.tracebacks()
    assert not standby.thread_races()
