"""Chaos on the real control plane: the apiserver and etcd go away under a running operator.

With the apiserver stopped the operator's liveness must fail within staleAfter plus Kopf's
probe-result cache (10 s, not configurable) plus one poll; once it is back, liveness recovers on its
own and reconciles resume (a spec change made afterwards is applied). etcd going away is seen the
same way (the heartbeat's list reads through to etcd). After each fault the pool's objects are
exactly the expected set: nothing duplicated, nothing orphaned. Figures go to
`<run dir>/chaos-figures.json` and the test output.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

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
    with chaos_operator(cluster, pool.ns, workdir, env={"SEMIPD_STALE_AFTER": "10s"}) as op:
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
