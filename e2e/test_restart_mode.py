"""Restart-mode split changes under load, end to end: the simulated engine run as Semi-PD `main` runs
(`sim-semipd`: the split is fixed at launch, so a change relaunches the engine).

Three replicas serve a steady Poisson load at a prefill share too small for it. The controller raises
the share; each change is a drained restart: the agent takes the pod out of Ready, waits until the
engine holds no request, relaunches it with the new split and comes back. The test samples the pods
every half second and asserts: the decisions say restart, at most one pod of the node pool is out of
Ready at any time, every pod ends on the new share, and no client request fails.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.fleet_load import LoadDriver, PoissonArrivals
from e2e.harness import wait_until
from e2e.operator_process import OperatorProcess, running_operator
from e2e.poolstatus import condition, get_pool, pool_decisions
from semipd.controller.agents import ready_pod_ips

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]  # three drained restarts, one at a time

NS = "restart-e2e"
POOL = "rs"
REPLICAS = 3
START_PREFILL = 20
RESULTS_LOG = Path("/tmp") / "semipd-restart-e2e-results.json"

MANIFEST = {
    "apiVersion": "semipd.io/v1alpha1",
    "kind": "InferencePool",
    "metadata": {"name": POOL},
    "spec": {
        "model": {"name": "llama-3-8b", "source": "hf://meta-llama/Llama-3.1-8B-Instruct", "profile": "llama-3-8b"},
        "engine": {"kind": "sim-semipd", "args": ["--load-time", "2"]},
        "nodePools": [
            {"name": "h200", "accelerator": "nvidia", "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"},
             "minReplicas": REPLICAS, "maxReplicas": REPLICAS, "costPerHour": 10},
        ],
        # Decode pinned: the test is about how a change is carried out, not which one is chosen.
        "semiPD": {"initialPrefillPercent": START_PREFILL, "minPrefillPercent": 20, "maxPrefillPercent": 90,
                   "stepPercent": 10, "initialDecodePercent": 100, "minDecodePercent": 100,
                   "maxDecodePercent": 100},
        "slo": {"ttftP99": "200ms", "itlP99": "60ms", "window": "15s"},
        "autoscaling": {"interval": "5s", "scaleDownStabilization": "40s"},
    },
}  # fmt: skip


def pool(cluster: Any) -> dict[str, Any]:
    return get_pool(cluster, NS, POOL)


def splits(cluster: Any) -> list[dict[str, Any]]:
    return [s for p in (pool(cluster).get("status") or {}).get("nodePools", []) for s in p["splits"]]


def engine_pods(cluster: Any) -> list[dict[str, Any]]:
    items = cluster.core().list_namespaced_pod(NS, label_selector=f"semipd.io/pool={POOL}").items
    return [cluster.core().api_client.sanitize_for_serialization(p) for p in items]


class ReadySampler:
    """Counts the pool's Ready engine pods every half second while running; keeps the minimum."""

    def __init__(self, cluster: Any) -> None:
        self.cluster, self.fewest, self.samples = cluster, REPLICAS, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                pods = engine_pods(self.cluster)
            except Exception:  # a failed read is not a sample
                continue
            self.fewest = min(self.fewest, len(ready_pod_ips(pods)))
            self.samples += 1

    def __enter__(self) -> ReadySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


@pytest.fixture(scope="module")
def fleet(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    with running_operator(cluster, NS, tmp_path_factory.mktemp("restart"), resync="5s") as op:
        cluster.kubectl("apply", "-n", NS, "-f", "-", input=yaml.safe_dump(MANIFEST))
        wait_until(lambda: condition(pool(cluster), "Ready").get("status") == "True", timeout=180, what="pool Ready")
        wait_until(lambda: len(splits(cluster)) == REPLICAS, timeout=60, what="every pod reports its split")
        yield op


def moved(cluster: Any) -> bool:
    now = splits(cluster)
    return len(now) == REPLICAS and all(s["prefillPercent"] > START_PREFILL for s in now)


def test_restart_mode_changes_go_one_pod_at_a_time_and_lose_no_request(cluster: Any, fleet: OperatorProcess) -> None:
    assert {s["prefillPercent"] for s in splits(cluster)} == {START_PREFILL}
    load = LoadDriver(cluster.core(), NS, POOL, PoissonArrivals(), model="llama-3-8b", slice_s=1.0)
    with ReadySampler(cluster) as sampler, load.running(RESULTS_LOG):
        assert isinstance(load.arrivals, PoissonArrivals)
        load.arrivals.rate = 4.0
        wait_until(lambda: moved(cluster),
                   timeout=420, what="every pod restarted onto a larger prefill share",
                   on_timeout=lambda: repr([pool_decisions(pool(cluster)), splits(cluster)]))  # fmt: skip
        load.arrivals.rate = 0.0
    changes = pool_decisions(pool(cluster), "SplitChange")
    assert changes, "no split change recorded"
    assert {d["details"]["switchMode"] for d in changes} == {"restart"}
    assert sampler.samples > 100
    assert sampler.fewest >= REPLICAS - 1, f"{REPLICAS - sampler.fewest} pods were out of Ready at once"
    assert len(load.results) > 200
    assert load.failures() == []
    assert not fleet.tracebacks()
