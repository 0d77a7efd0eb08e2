"""Chaos on the real control plane: the apiserver and etcd go away under a running operator.

With the apiserver stopped the operator's liveness must fail within staleAfter plus Kopf's
probe-result cache (10 s, not configurable) plus one poll; once it is back, liveness recovers on its
own and reconciles resume (a spec change made afterwards is applied). etcd going away is seen the
same way (the heartbeat's list reads through to etcd). Watch expiry is forced for real: with the
apiserver down, etcd is compacted past every revision the operator has seen, so each of its watches
resumes into 410 Gone and must re-list (Kopf logs that at debug level, which this operator runs at).
After each fault the pool's objects are
exactly the expected set: nothing duplicated, nothing orphaned. Figures go to
`<run dir>/chaos-figures.json` and the test output.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from kubernetes import client

from e2e.chaos import ChaosPool, chaos_operator, record
from e2e.harness import wait_until
from e2e.operator_process import OperatorProcess

pytestmark = pytest.mark.e2e

STALE_AFTER = 10.0
KOPF_PROBE_CACHE = 10.0
"""Kopf re-runs probe handlers at most every 10 s and serves the cached result in between."""
POLL = 0.5


@pytest.fixture(scope="module")
def pool(cluster: Any) -> ChaosPool:
    return ChaosPool(cluster, "chaos-e2e", "chaos")


@pytest.fixture(scope="module")
def operator(cluster: Any, pool: ChaosPool, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    workdir = tmp_path_factory.mktemp("chaos-operator")
    env = {"SEMIPD_STALE_AFTER": "10s", "SEMIPD_LOG_LEVEL": "debug"}
    with chaos_operator(cluster, pool.ns, workdir, env=env) as op:
        try:
            pool.apply(1)
            pool.wait_replicas(1)
            wait_until(op.live, timeout=30, what="operator live")
            yield op
        finally:
            for name in ("etcd", "kube-apiserver"):  # a failed test must not leave the cluster broken
                if name in cluster.state.get("stopped", []):
                    cluster.start_component(name)


def outage(cluster: Any, pool: ChaosPool, op: OperatorProcess, component: str, replicas_after: int) -> dict[str, float]:
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
    pool.apply(replicas_after)
    converged = pool.wait_replicas(replicas_after)
    assert pool.owned() == pool.expected()  # nothing duplicated or orphaned
    assert pool.deployment()["spec"]["replicas"] == replicas_after
    return {
        "probe_failed_after_s": detected,
        "component_healthy_after_restart_s": healthy_after,
        "probe_recovered_after_s": live_again,
        "spec_change_converged_after_s": converged,
        **pool.rollout_figures(),
        "duplicated_or_orphaned_objects": float(len(pool.owned()) - len(pool.expected())),
    }


def test_apiserver_outage_fails_liveness_and_recovers(cluster: Any, pool: ChaosPool, operator: OperatorProcess) -> None:
    figures = outage(cluster, pool, operator, "kube-apiserver", replicas_after=2)
    record(cluster, "apiserver_restart", figures)
    assert figures["probe_failed_after_s"] <= STALE_AFTER + KOPF_PROBE_CACHE + 2 * POLL + 2


def test_etcd_outage_fails_liveness_and_recovers(cluster: Any, pool: ChaosPool, operator: OperatorProcess) -> None:
    figures = outage(cluster, pool, operator, "etcd", replicas_after=1)
    record(cluster, "etcd_restart", figures)
    assert figures["probe_failed_after_s"] <= STALE_AFTER + KOPF_PROBE_CACHE + 2 * POLL + 2 + 5  # + list timeout


def etcd_call(cluster: Any, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """etcd's v3 JSON gateway (keys and values base64), on the cluster's loopback client port."""
    r = httpx.post(f"http://127.0.0.1:{cluster.ports.etcd_client}{path}", json=body, timeout=10)
    r.raise_for_status()
    out: dict[str, Any] = r.json()
    return out


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def watch_from(cluster: Any, ns: str, resource_version: str) -> int:
    """The HTTP code of a watch of InferencePools resumed at `resource_version` (410 when expired:
    as an HTTP status or as the stream's first ERROR event)."""
    api = client.CustomObjectsApi(cluster.api())
    try:
        resp = api.list_namespaced_custom_object(
            "semipd.io", "v1alpha1", ns, "inferencepools", watch=True, resource_version=resource_version,
            timeout_seconds=3, _preload_content=False,
        )  # fmt: skip
    except client.ApiException as e:
        return int(e.status)
    try:
        first = resp.readline()
    finally:
        resp.release_conn()
    event = json.loads(first) if first else {}
    return int(event["object"]["code"]) if event.get("type") == "ERROR" else 200


def test_watch_expiry_410_gone_relists_and_recovers(cluster: Any, pool: ChaosPool, operator: OperatorProcess) -> None:
    assert operator.live()
    seen_rv = pool.pool()["metadata"]["resourceVersion"]  # at or before what the operator's watch holds
    log_start = operator.log.stat().st_size
    cluster.stop_component("kube-apiserver")
    try:
        for i in range(3):  # move etcd past every revision any watcher has seen, then drop that history
            head = etcd_call(cluster, "/v3/kv/put", {"key": b64(f"/semipd-e2e/watch-expiry/{i}"), "value": b64("x")})
        revision = int(head["header"]["revision"])
        etcd_call(cluster, "/v3/kv/compaction", {"revision": str(revision), "physical": True})
    finally:
        healthy_after = cluster.start_component("kube-apiserver")
    t1 = time.monotonic()
    assert watch_from(cluster, pool.ns, seen_rv) == 410  # the fault is real: that watch position is gone

    def relisted() -> bool:
        with operator.log.open() as f:
            f.seek(log_start)
            return "Restarting the watch-stream for inferencepools" in f.read()

    wait_until(relisted, timeout=90, interval=POLL, what="the operator's InferencePool watch to meet 410 and re-list")
    relist_after = time.monotonic() - t1
    wait_until(operator.live, timeout=STALE_AFTER + KOPF_PROBE_CACHE + 30, interval=POLL, what="probe live")
    pool.apply(2)
    # The compaction sends every watcher of the cluster into 410, the controller manager too: its
    # informers took 33 s to make the new pods here and over 120 s in CI, which is its recovery, not
    # ours. The operator's part (the Deployment scaled) is bounded tightly; the rollout loosely.
    converged = pool.wait_replicas(2, timeout=300)
    assert pool.stages["deployment_scaled_s"] <= 15
    assert pool.owned() == pool.expected()  # nothing duplicated or orphaned
    assert pool.deployment()["spec"]["replicas"] == 2
    record(cluster, "watch_expiry_410", {
        "apiserver_healthy_after_restart_s": healthy_after,
        "operator_relisted_after_s": relist_after,
        "spec_change_converged_after_s": converged,
        **pool.rollout_figures(),
        "duplicated_or_orphaned_objects": float(len(pool.owned()) - len(pool.expected())),
    })  # fmt: skip
