"""The restart and unsupported switch modes with real processes.

The sim engine run with `--enable-semi-pd` behaves like Semi-PD `main`: it starts its own prefill
worker from SEMI_PD_PREFILL_SM_PERCENTILE at launch, so the `sglang-semipd` driver's relaunch path
runs for real against it.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from semipd.agent.engineprobe import inflight_from_metrics
from semipd.sim.engine.localpod import LocalPod, PodOptions


def gauge(text: str, name: str) -> float:
    return float(next(ln for ln in text.splitlines() if ln.startswith(name + " ")).split()[1])


def restart_pod(pod_factory: Callable[..., LocalPod], env: dict[str, str] | None = None) -> LocalPod:
    return pod_factory(
        PodOptions(
            driver="sglang-semipd",
            speedup=20.0,
            prefill_percent=60,
            decode_percent=100,
            env=env or {},
            agent_args=["--restart-drain-seconds", "0.1", "--restart-timeout", "20"],
        )
    )


def test_restart_mode_relaunches_engine_with_new_env(pod_factory: Callable[..., LocalPod]) -> None:
    pod = restart_pod(pod_factory)
    assert gauge(pod.engine_metrics_text(), "semipd_sim_prefill_share_ratio") == 0.6
    first_engine = pod.pids()["engine"]
    status, body = pod.put_split(40, 90, wait=False)
    assert status == 202
    # Readiness drops before the engine is stopped and returns once the new one is healthy.
    seen = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        seen.append(pod.admin("GET", "/readyz", auth=False)[0])
        _, body = pod.admin("GET", "/v1/split")
        if body["pending"] is None and seen[-1] == 200:
            break
        time.sleep(0.02)
    assert 503 in seen
    assert seen[-1] == 200
    assert (body["prefillPercent"], body["decodePercent"], body["switchMode"]) == (40, 90, "restart")
    assert body["switchesTotal"] == 1
    assert pod.pids()["engine"] != first_engine
    text = pod.engine_metrics_text()
    assert gauge(text, "semipd_sim_prefill_share_ratio") == 0.4
    assert gauge(text, "semipd_sim_decode_share_ratio") == 0.9
    log = pod.log_tail(200)
    assert "--enable-semi-pd" in log  # the driver adds the flag
    assert "nvidia-cuda-mps-control not found on PATH; not starting the MPS control daemon" in log


def test_restart_mode_rolls_back_when_relaunch_fails(pod_factory: Callable[..., LocalPod]) -> None:
    pod = restart_pod(pod_factory, env={"SEMIPD_SIM_FAULT": "prefill-crash-on-start:30"})
    status, body = pod.put_split(30)
    assert status == 500
    assert "relaunched with the previous split 60/100" in body["error"]
    assert body["prefillPercent"] == 60
    assert body["state"] == "running"
    assert gauge(pod.engine_metrics_text(), "semipd_sim_prefill_share_ratio") == 0.6
    assert gauge(pod.metrics_text(), "semipd_agent_failed_switches_total") == 1


def test_engine_without_split_support_answers_422(pod_factory: Callable[..., LocalPod]) -> None:
    # Any engine command works under the vllm driver; the sim engine here only stands in for a
    # process that serves /health.
    pod = pod_factory(PodOptions(driver="vllm", prefill_percent=None, decode_percent=None,
                                 engine_args=["--enable-semi-pd"]))  # fmt: skip
    status, body = pod.admin("GET", "/v1/split")
    assert (body["supported"], body["switchMode"], body["prefillPercent"]) == (False, "none", 100)
    status, body = pod.put_split(60)
    assert status == 422
    assert body["reason"] == "UnsupportedByEngine"
    assert "vLLM" in body["error"]


def test_restart_mode_drains_in_flight_requests_before_the_relaunch(pod_factory: Callable[..., LocalPod]) -> None:
    # Real time (speedup 1): a 400-token completion takes seconds; the split change arrives while it
    # runs. The agent waits for it (drain) before it stops the engine, so it completes in full; the
    # SIGTERM grace is 0.5 s, so without that wait the engine would be killed mid-request (checked
    # with --restart-drain-timeout 0: the client's connection breaks).
    pod = pod_factory(
        PodOptions(
            driver="sglang-semipd",
            speedup=1.0,
            prefill_percent=60,
            decode_percent=100,
            agent_args=[
                "--restart-drain-seconds",
                "0.1",
                "--restart-timeout",
                "20",
                "--restart-drain-timeout",
                "60",
                "--drain-timeout",
                "0.5",
            ],
        )
    )
    first_engine = pod.pids()["engine"]
    result: dict[str, Any] = {}

    def complete() -> None:
        body = json.dumps({"model": "llama-3-8b", "prompt": "hello " * 50, "max_tokens": 400}).encode()
        req = urllib.request.Request(f"{pod.engine_url}/v1/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            result["status"] = resp.status
            result["body"] = json.loads(resp.read())

    client = threading.Thread(target=complete)
    client.start()
    deadline = time.monotonic() + 10
    while (inflight_from_metrics(pod.engine_metrics_text()) or 0) < 1:
        assert time.monotonic() < deadline, "the request never started"
        time.sleep(0.02)
    status, _ = pod.put_split(40, 90, wait=False)
    assert status == 202
    client.join(timeout=60)
    assert result["status"] == 200
    assert result["body"]["usage"]["completion_tokens"] == 400
    # The relaunch happened after the request was done.
    deadline = time.monotonic() + 30
    while pod.admin("GET", "/v1/split")[1]["pending"] is not None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert pod.pids()["engine"] != first_engine
    assert gauge(pod.engine_metrics_text(), "semipd_sim_prefill_share_ratio") == 0.4
