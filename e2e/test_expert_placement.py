"""MoE expert placement end to end: real control plane, real Prometheus, agents and simulated engines.

An MoE pool (Qwen3-30B-A3B shape: 48 MoE layers x 128 experts, top-8) on 4 accelerators per
replica with 32 redundant slots serves streamed requests while its simulated engines route tokens
with a strong Zipf skew. Under the trivial map the worst layer's max/mean is far above the 1.3
threshold, so after `rebalanceWindow` the operator writes version 1 of the placement ConfigMap
(our envelope, SGLang's physical_to_logical_map, the vllm-ascend map), pushes it to every Ready
pod's agent, and the engines' balancedness in Prometheus goes up. The version survives an operator
restart; a second pool whose slots do not split over its devices gets a clear status reason and
keeps serving.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from e2e.fleet_load import LoadDriver, PoissonArrivals
from e2e.harness import wait_until
from e2e.harness.kube import condition
from e2e.operator_process import OperatorProcess, running_operator
from semipd.controller.agents import ready_pod_ips

pytestmark = pytest.mark.e2e

NS = "experts-e2e"
POOL = "moe"
BAD = "moe-bad"
NODE_POOL = "h200"
CONFIGMAP = f"{POOL}-{NODE_POOL}-experts"
INTERVAL = 5.0
WINDOW = 20
LAYERS, EXPERTS, SLOTS, DEVICES = 48, 128, 160, 4
RESULTS_LOG = Path("/tmp") / "semipd-experts-e2e-results.json"
FIGURES_LOG = Path("/tmp") / "semipd-experts-e2e-figures.json"


def manifest(name: str, redundant: int, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "semipd.io/v1alpha1",
        "kind": "InferencePool",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": "qwen3-moe", "source": "hf://Qwen/Qwen3-30B-A3B", "architecture": "moe",
                      "experts": EXPERTS, "expertsPerToken": 8, "maxContextLength": 8192, "profile": "qwen3-30b-a3b"},
            "engine": {"kind": "sim", "args": ["--load-time", "2", "--expert-skew", "1.4", "--expert-seed", "3"]},
            "nodePools": [
                {"name": NODE_POOL, "accelerator": "nvidia", "acceleratorsPerReplica": DEVICES,
                 "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"},
                 "minReplicas": replicas, "maxReplicas": replicas, "costPerHour": 10},
            ],
            "slo": {"ttftP99": "10s", "itlP99": "1s", "window": "15s"},
            "autoscaling": {"interval": f"{INTERVAL:.0f}s"},
            "placement": {"experts": {"enabled": True, "redundantExperts": redundant, "rebalanceThreshold": 1.3,
                                      "rebalanceWindow": f"{WINDOW}s", "rebalanceInterval": "1h"}},
        },
    }  # fmt: skip


def get_pool(cluster: Any, name: str = POOL) -> dict[str, Any]:
    out = cluster.kubectl("get", "inferencepools.semipd.io", name, "-n", NS, "-o", "json").stdout
    doc: dict[str, Any] = json.loads(out)
    return doc


def expert_status(cluster: Any, name: str = POOL) -> dict[str, Any]:
    placement = (get_pool(cluster, name).get("status") or {}).get("placement") or {}
    return {e["nodePool"]: e for e in placement.get("experts") or []}.get(NODE_POOL, {})


def configmap(cluster: Any) -> dict[str, Any] | None:
    run = cluster.kubectl("get", "configmap", CONFIGMAP, "-n", NS, "-o", "json", check=False)
    if run.returncode != 0:
        return None
    doc: dict[str, Any] = json.loads(run.stdout)
    return doc


def ready_pods(cluster: Any, name: str = POOL) -> dict[str, str]:
    core = cluster.core()
    pods = core.list_namespaced_pod(NS, label_selector=f"semipd.io/pool={name}").items
    return ready_pod_ips([core.api_client.sanitize_for_serialization(p) for p in pods])


def prom(cluster: Any, promql: str) -> dict[str, float]:
    """pod -> value of an instant query (NaN samples dropped)."""
    out = {}
    for item in cluster.prometheus_query(promql):
        value = float(item["value"][1])
        if value == value:
            out[item["metric"].get("pod", "")] = value
    return out


# Pod labels become series labels, and the KV-cache placement labels live pods, so one pod's
# series can change identity mid-test: every query first sums per (pod, ...) to merge them.


def gauge(cluster: Any, name: str) -> dict[str, float]:
    return prom(cluster, f'max by (pod) ({name}{{namespace="{NS}",pod=~"{POOL}-{NODE_POOL}-.*"}})')


def observed_balancedness(cluster: Any, window: str) -> dict[str, float]:
    """Per pod, the mean over layers of mean/max device tokens over `window`, from the device counters."""
    selector = f'{{namespace="{NS}",pod=~"{POOL}-{NODE_POOL}-.*"}}'
    rate = f"sum by (pod, layer, device) (rate(semipd_sim_expert_device_tokens_total{selector}[{window}]))"
    return prom(cluster, f"avg by (pod) (avg by (pod, layer) ({rate}) / max by (pod, layer) ({rate}))")


def agent_experts(cluster: Any, pod: str, ip: str) -> dict[str, Any]:
    core = cluster.core()
    token = base64.b64decode(core.read_namespaced_secret(f"{POOL}-agent-token", NS).data["token"]).decode()
    ports = core.read_namespaced_pod(pod, NS).spec.containers[0].ports
    admin = next(p.container_port for p in ports if p.name == "admin")
    r = httpx.get(f"http://{ip}:{admin}/v1/experts", headers={"Authorization": f"Bearer {token}"}, timeout=5)
    r.raise_for_status()
    doc: dict[str, Any] = r.json()
    return doc


def dump(cluster: Any) -> str:
    return json.dumps(
        {
            "status": get_pool(cluster).get("status"),
            "configmap": (configmap(cluster) or {}).get("metadata"),
            "pods": cluster.kubectl("get", "pods", "-n", NS, "-o", "wide").stdout,
        },
        indent=1,
    )[:20000]


@pytest.fixture(scope="module")
def fleet(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[OperatorProcess, LoadDriver]]:
    with running_operator(cluster, NS, tmp_path_factory.mktemp("experts"), resync="5s") as op:
        cluster.kubectl("apply", "-n", NS, "-f", "-", input=yaml.safe_dump(manifest(POOL, 32, 2)))
        wait_until(
            lambda: condition(get_pool(cluster), "Ready").get("status") == "True" and len(ready_pods(cluster)) == 2,
            timeout=150,
            what="pool Ready with 2 replicas",
            on_timeout=lambda: dump(cluster),
        )
        load = LoadDriver(
            cluster.core(), NS, POOL, PoissonArrivals(input_tokens=256, output_tokens=32), model="qwen3-moe"
        )
        assert isinstance(load.arrivals, PoissonArrivals)
        load.arrivals.rate = 4.0
        with load.running(RESULTS_LOG):
            yield op, load


def test_skewed_load_writes_version_1_and_every_engine_applies_it(
    cluster: Any, fleet: tuple[OperatorProcess, LoadDriver]
) -> None:
    _, load = fleet
    # Before: the trivial map on a Zipf-1.4 load is far from balanced, on every pod, in Prometheus.
    before = wait_until(
        lambda: (g := gauge(cluster, "semipd_sim_expert_balance_ratio")) and len(g) == 2 and g,
        timeout=60,
        what="balancedness of both engines in Prometheus",
    )
    assert all(v < 0.8 for v in before.values()), before
    versions = gauge(cluster, "semipd_sim_expert_placement_version")
    assert len(versions) == 2, versions
    assert all(v == 0 for v in versions.values()), versions
    observed_before = wait_until(
        lambda: (o := observed_balancedness(cluster, "15s")) and len(o) == 2 and o,
        timeout=60,
        what="device-token rates of both engines",
    )
    assert all(v < 0.8 for v in observed_before.values()), observed_before

    cm = wait_until(
        lambda: (c := configmap(cluster)) is not None and c,
        timeout=WINDOW + 12 * INTERVAL,
        what="the expert placement ConfigMap",
        on_timeout=lambda: dump(cluster),
    )
    assert cm["metadata"]["labels"]["semipd.io/expert-placement-version"] == "1"
    assert cm["metadata"]["ownerReferences"][0]["kind"] == "InferencePool"
    envelope = json.loads(cm["data"]["placement.json"])
    assert envelope["format"] == "semipd.io/expert-placement"
    assert envelope["version"] == 1
    assert (envelope["layers"], envelope["logicalExperts"], envelope["physicalSlots"], envelope["devices"]) == (
        LAYERS, EXPERTS, SLOTS, DEVICES,
    )  # fmt: skip
    assert envelope["balancednessAfter"] > envelope["balancednessBefore"]
    sglang = json.loads(cm["data"]["sglang-init-expert-location.json"])
    assert list(sglang) == ["physical_to_logical_map"]
    assert sglang["physical_to_logical_map"] == envelope["physicalToLogicalMap"]
    assert all(sorted(set(row)) == list(range(EXPERTS)) for row in sglang["physical_to_logical_map"])
    ascend = json.loads(cm["data"]["vllm-ascend-expert-map.json"])
    assert ascend["moe_layer_count"] == LAYERS
    for layer in ascend["layer_list"]:
        devices = [d["device_expert"] for d in layer["device_list"]]
        assert [len(d) for d in devices] == [SLOTS // DEVICES] * DEVICES
        assert all(len(set(d)) == len(d) for d in devices)  # anti-affine: no device holds an expert twice
        assert [e for d in devices for e in d] == envelope["physicalToLogicalMap"][layer["layer_id"]]

    # Every engine reports version 1: its own metric in Prometheus and its agent's GET /v1/experts.
    wait_until(
        lambda: (v := gauge(cluster, "semipd_sim_expert_placement_version")) and len(v) == 2
        and all(x == 1 for x in v.values()),
        timeout=30,
        what="both engines at placement version 1 in Prometheus",
        on_timeout=lambda: dump(cluster),
    )  # fmt: skip
    for pod, ip in ready_pods(cluster).items():
        doc = agent_experts(cluster, pod, ip)
        assert doc["supported"] is True, (pod, doc)
        assert doc["version"] == 1, (pod, doc)
        assert doc["rebalancesTotal"] == 1, (pod, doc)

    status = wait_until(
        lambda: (s := expert_status(cluster)).get("version") == 1 and s.get("applied") == "2/2" and s,
        timeout=4 * INTERVAL,
        what="status placement.experts version 1 applied 2/2",
        on_timeout=lambda: dump(cluster),
    )
    assert status["configMap"] == CONFIGMAP
    assert status["maxMeanBefore"] > 1.3 > status["maxMeanAfter"]
    assert status["balancednessAfter"] > status["balancednessBefore"]
    assert status["lastRebalance"]
    rebalances = [d for d in get_pool(cluster)["status"]["decisions"] if d["action"] == "ExpertRebalance"]
    assert len(rebalances) == 1, rebalances
    assert rebalances[0]["reason"] == "ImbalanceSustained"
    assert rebalances[0]["details"]["version"] == "1"
    assert rebalances[0]["details"]["actuation"] == "Agent"
    assert float(rebalances[0]["details"]["aboveFor"].rstrip("s")) >= WINDOW

    # After: the engines' balancedness in Prometheus is up, both the map's (gauge) and the one the
    # device counters measure over a window that starts after the switch.
    after = gauge(cluster, "semipd_sim_expert_balance_ratio")
    assert len(after) == 2
    for pod, value in after.items():
        assert value > before[pod] + 0.1, (pod, before[pod], value)
        assert value == pytest.approx(status["balancednessAfter"], abs=2e-3)
    time.sleep(12)
    observed_after = observed_balancedness(cluster, "10s")
    assert len(observed_after) == 2, observed_after
    for pod, value in observed_after.items():
        assert value > observed_before[pod] + 0.1, (pod, observed_before[pod], value)
    assert load.failures() == []
    FIGURES_LOG.write_text(
        json.dumps(
            {
                "balancednessGauge": {"before": before, "after": after},
                "balancednessFromDeviceCounters": {"before": observed_before, "after": observed_after},
                "status": status,
                "decision": rebalances[0],
                "requests": len(load.results),
            },
            indent=1,
        )
    )


def test_the_version_survives_an_operator_restart(cluster: Any, fleet: tuple[OperatorProcess, LoadDriver]) -> None:
    op, load = fleet
    cm = configmap(cluster)
    assert cm is not None
    written = cm["metadata"]["annotations"]["semipd.io/expert-placement-written"]
    op.kill()
    op.start()
    # Two full windows with the imbalance data a fresh process would rebalance on: nothing moves.
    time.sleep(2 * WINDOW + 2 * INTERVAL)
    cm = configmap(cluster)
    assert cm is not None
    assert cm["metadata"]["labels"]["semipd.io/expert-placement-version"] == "1"
    assert cm["metadata"]["annotations"]["semipd.io/expert-placement-written"] == written
    status = expert_status(cluster)
    assert status["version"] == 1, status
    assert status["lastRebalance"] == written
    assert status["applied"] == "2/2", status
    assert status["reason"] in ("Balanced", "RebalanceIntervalNotElapsed"), status
    versions = gauge(cluster, "semipd_sim_expert_placement_version")
    assert len(versions) == 2, versions
    assert all(v == 1 for v in versions.values()), versions
    assert load.failures() == []


def test_slots_that_do_not_split_over_the_devices_are_reported_and_serving_goes_on(
    cluster: Any, fleet: tuple[OperatorProcess, LoadDriver]
) -> None:
    cluster.kubectl("apply", "-n", NS, "-f", "-", input=yaml.safe_dump(manifest(BAD, 30, 1)))
    status = wait_until(
        lambda: (s := expert_status(cluster, BAD)).get("reason") and s,
        timeout=60,
        what="expert status of the pool with 158 slots on 4 devices",
        on_timeout=lambda: json.dumps(get_pool(cluster, BAD).get("status"), indent=1)[:8000],
    )
    assert status["reason"] == "InvalidTopology", status
    assert "158" in status["message"], status
    assert status["version"] == 0
    wait_until(
        lambda: condition(get_pool(cluster, BAD), "Ready").get("status") == "True",
        timeout=120,
        what="the pool with a bad expert topology still Ready",
    )
    assert cluster.kubectl("get", "configmap", f"{BAD}-{NODE_POOL}-experts", "-n", NS, check=False).returncode != 0
    ip = next(iter(ready_pods(cluster, BAD).values()))
    r = httpx.post(
        f"http://{ip}:8000/v1/completions",
        json={"model": "qwen3-moe", "prompt": "hello", "max_tokens": 4},
        timeout=30,
    )
    assert r.status_code == 200, r.text
