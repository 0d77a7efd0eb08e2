"""The simulated engine as real processes: API, SGLang metric names and buckets, KV queueing, MoE counters."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from semipd.perf import LatencyModel
from semipd.sim.engine import metrics as engine_metrics
from semipd.sim.engine.localpod import LocalPod, PodOptions, free_port, loopback_host
from semipd.sim.engine.probe import stream_completion

Families = dict[str, list[tuple[str, dict[str, str], float]]]


def families(text: str) -> Families:
    out: Families = {}
    for family in text_string_to_metric_families(text):
        out[family.name] = [(s.name, s.labels, s.value) for s in family.samples]
    return out


def sample(fams: Families, family: str, name: str, **labels: str) -> float:
    matches = [v for n, lab, v in fams[family] if n == name and all(lab.get(k) == x for k, x in labels.items())]
    assert len(matches) == 1, (family, name, labels, matches)
    return matches[0]


def bucket_edges(fams: Families, family: str) -> list[float]:
    return [float(lab["le"]) for n, lab, _ in fams[family] if n.endswith("_bucket") and lab["le"] != "+Inf"]


def post(url: str, body: object) -> tuple[int, dict[str, object]]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


async def test_metrics_use_sglang_names_buckets_and_counts(pod_factory: Callable[..., LocalPod]) -> None:
    speedup = 10.0
    pod = pod_factory(PodOptions(speedup=speedup, prefill_percent=50))
    shapes = [(100 + 37 * i, 3 + i % 5) for i in range(12)]
    async with aiohttp.ClientSession() as session:
        results = await asyncio.gather(
            *(stream_completion(session, pod.engine_url, p, m, chat=i % 2 == 0) for i, (p, m) in enumerate(shapes))
        )
    assert all(r.ok for r in results), [r.error for r in results]
    fams = families(pod.engine_metrics_text())
    model = {"model_name": "llama-3-8b"}

    assert bucket_edges(fams, "sglang:time_to_first_token_seconds") == list(engine_metrics.TTFT_BUCKETS)
    assert bucket_edges(fams, "sglang:inter_token_latency_seconds") == list(engine_metrics.ITL_BUCKETS)
    assert bucket_edges(fams, "sglang:e2e_request_latency_seconds") == list(engine_metrics.E2E_BUCKETS)
    assert bucket_edges(fams, "sglang:time_per_output_token_seconds") == list(engine_metrics.TPOT_BUCKETS)
    # engines.md section 3.1 edges, spelled out so a change to the constants cannot hide here.
    assert engine_metrics.TTFT_BUCKETS[:6] == (0.1, 0.3, 0.5, 0.7, 0.9, 1)
    assert (engine_metrics.ITL_BUCKETS[0], engine_metrics.ITL_BUCKETS[-1]) == (0.002, 2)
    assert (len(engine_metrics.ITL_BUCKETS), len(engine_metrics.TPOT_BUCKETS)) == (22, 20)
    assert engine_metrics.E2E_BUCKETS[-1] == 1000

    n = len(shapes)
    assert sample(fams, "sglang:time_to_first_token_seconds", "sglang:time_to_first_token_seconds_count", **model) == n
    assert sample(fams, "sglang:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds_count", **model) == n
    # ITL is weighted per token: one observation per token after the first.
    itl_count = sample(fams, "sglang:inter_token_latency_seconds", "sglang:inter_token_latency_seconds_count", **model)
    assert itl_count == sum(m - 1 for _, m in shapes)
    assert sample(fams, "sglang:prompt_tokens", "sglang:prompt_tokens_total", **model) == sum(p for p, _ in shapes)
    assert sample(fams, "sglang:generation_tokens", "sglang:generation_tokens_total", **model) == sum(
        m for _, m in shapes
    )
    assert sample(fams, "sglang:num_requests", "sglang:num_requests_total", **model) == n
    # Upstream SGLang's prompt-length histogram (the KV placement's long-prompt share), one per request.
    assert bucket_edges(fams, "sglang:prompt_tokens_histogram") == list(engine_metrics.PROMPT_TOKENS_BUCKETS)
    prompts = "sglang:prompt_tokens_histogram"
    assert sample(fams, prompts, prompts + "_count", **model) == n
    assert sample(fams, prompts, prompts + "_sum", **model) == sum(p for p, _ in shapes)
    gauge_labels = {"model_name": "llama-3-8b", "engine_type": "unified"}
    assert sample(fams, "sglang:num_running_reqs", "sglang:num_running_reqs", **gauge_labels) == 0
    assert sample(fams, "sglang:num_queue_reqs", "sglang:num_queue_reqs", **gauge_labels) == 0
    assert sample(fams, "sglang:token_usage", "sglang:token_usage", **gauge_labels) == 0
    lm = LatencyModel.from_names("h200", "llama-3-8b")
    assert sample(fams, "sglang:max_total_num_tokens", "sglang:max_total_num_tokens", **gauge_labels) == (
        lm.kv_capacity_tokens()
    )
    assert sample(fams, "semipd_sim_prefill_share_ratio", "semipd_sim_prefill_share_ratio") == 0.5

    # Latencies are reported in model seconds (wall x speedup): at least the model's prefill time,
    # at most what the clients measured (which includes HTTP) scaled back to model time.
    ttft_sum = sample(fams, "sglang:time_to_first_token_seconds", "sglang:time_to_first_token_seconds_sum", **model)
    floor = sum(lm.prefill_time([p], 0.5) for p, _ in shapes)
    assert floor <= ttft_sum <= 1.05 * speedup * sum(r.ttft for r in results)


def test_non_streaming_and_errors(pod_factory: Callable[..., LocalPod]) -> None:
    pod = pod_factory(PodOptions(speedup=20.0))
    status, body = post(pod.engine_url + "/v1/completions", {"prompt": "Hello there, engine", "max_tokens": 6})
    assert status == 200
    assert body["usage"] == {"prompt_tokens": 4, "completion_tokens": 6, "total_tokens": 10}
    status, body = post(
        pod.engine_url + "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    )
    assert status == 200
    assert body["object"] == "chat.completion"
    assert body["usage"]["completion_tokens"] == 3
    status, body = post(pod.engine_url + "/v1/completions", {"prompt": "x", "max_tokens": 0})
    assert status == 400
    assert "max_tokens" in str(body["error"])
    with urllib.request.urlopen(pod.engine_url + "/v1/models", timeout=10) as resp:
        assert json.loads(resp.read())["data"][0]["id"] == "llama-3-8b"


async def test_requests_queue_while_kv_is_full(pod_factory: Callable[..., LocalPod]) -> None:
    # 1000 KV tokens; each request reserves 500 + 300 = 800, so they must run one at a time.
    pod = pod_factory(PodOptions(speedup=10.0, engine_args=["--kv-capacity-tokens", "1000"]))
    async with aiohttp.ClientSession() as session:
        tasks = [asyncio.ensure_future(stream_completion(session, pod.engine_url, 500, 300)) for _ in range(3)]
        queued_seen = 0.0
        deadline = time.monotonic() + 30
        while not all(t.done() for t in tasks) and time.monotonic() < deadline:
            fams = families(pod.engine_metrics_text())
            queued_seen = max(queued_seen, sample(fams, "sglang:num_queue_reqs", "sglang:num_queue_reqs"))
            await asyncio.sleep(0.02)
        results = await asyncio.gather(*tasks)
        too_big = await stream_completion(session, pod.engine_url, 900, 200)
    assert all(r.ok for r in results)
    assert queued_seen >= 1
    ordered = sorted(results, key=lambda r: r.ttft)
    # Each request's first token only after the previous one finished and freed its KV.
    assert ordered[1].ttft >= ordered[0].e2e - 0.05
    assert ordered[2].ttft >= ordered[1].e2e - 0.05
    assert not too_big.ok
    assert too_big.error is not None
    assert "pool holds 1000" in too_big.error


@pytest.mark.parametrize(("skew", "spread_at_least"), [(0.0, 1.0), (1.0, 5.0)])
async def test_moe_models_count_tokens_per_expert(
    pod_factory: Callable[..., LocalPod], skew: float, spread_at_least: float
) -> None:
    pod = pod_factory(
        PodOptions(hardware="h100", model="qwen3-30b-a3b", speedup=20.0, engine_args=["--expert-skew", str(skew)])
    )
    shapes = [(300, 5), (700, 9), (50, 2)]
    async with aiohttp.ClientSession() as session:
        results = await asyncio.gather(*(stream_completion(session, pod.engine_url, p, m) for p, m in shapes))
    assert all(r.ok for r in results)
    fams = families(pod.engine_metrics_text())
    samples = fams["semipd_sim_expert_tokens"]
    layers = {lab["layer"] for _, lab, _ in samples}
    assert len(layers) == 48
    assert len(samples) == 48 * 128
    routed = sum(p for p, _ in shapes) + sum(m - 1 for _, m in shapes)  # prefill + decode tokens
    for layer in ("0", "47"):
        counts = [v for _, lab, v in samples if lab["layer"] == layer]
        assert sum(counts) == pytest.approx(8 * routed)  # top-8 routing: 8 expert slots per token
        assert max(counts) / min(counts) >= spread_at_least
    if skew == 0.0:
        assert max(v for *_, v in samples) == pytest.approx(min(v for *_, v in samples))


def test_owner_alone_refuses_wildcard_and_reports_no_worker(tmp_path: Path) -> None:
    bad = subprocess.run(
        [sys.executable, "-m", "semipd.sim.engine", "--role", "decode-owner", "--host", "0.0.0.0", "--run-dir", "r"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert bad.returncode == 2
    assert "wildcard" in bad.stderr
    host = loopback_host()
    port = free_port(host)
    owner = subprocess.Popen(
        [sys.executable, "-m", "semipd.sim.engine", "--role", "decode-owner", "--host", host, "--port", str(port),
         "--run-dir", str(tmp_path), "--load-time", "0"],
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        status = 0
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://{host}:{port}/health", timeout=2)
                status = 200
            except urllib.error.HTTPError as e:
                status = e.code
                break
            except urllib.error.URLError:
                time.sleep(0.05)
        assert status == 503  # serving, but no prefill worker has attached
        # A worker for another model is refused at attach (its "IPC handles" would not fit).
        worker = subprocess.run(
            [sys.executable, "-m", "semipd.sim.engine", "--role", "prefill-worker", "--run-dir", str(tmp_path),
             "--model", "qwen3-32b", "--hardware", "h100", "--prefill-percent", "50"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert worker.returncode == 1
        assert "mismatched" in worker.stderr
    finally:
        owner.terminate()
        assert owner.wait(30) == 0
