"""The load runner and CLI against fake streaming engines on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeEngine

from semipd.load import SLO, LoadConfig, RemoteEndpointError, check_endpoint, run_load
from semipd.load.cli import main
from semipd.traces import TraceRequest, synthetic


def burst(n: int, output_tokens: int = 8, input_tokens: int = 64, every_s: float = 0.0) -> list[TraceRequest]:
    return [TraceRequest(i * every_s, input_tokens, output_tokens) for i in range(n)]


async def test_streams_are_timed_and_succeed(fake_engine: FakeEngine) -> None:
    fake_engine.prefill_s, fake_engine.token_s = 0.05, 0.01
    result = await run_load(burst(4, output_tokens=10), LoadConfig(endpoints=(fake_engine.url,), model="ok"))
    assert [r.status for r in result.results] == ["ok"] * 4
    for r in result.results:
        assert r.output_tokens == 10
        assert len(r.itl_s) == 9
        assert r.ttft_s is not None
        assert r.ttft_s >= 0.05
        assert r.e2e_s is not None
        assert r.e2e_s >= r.ttft_s + 9 * 0.01
    s = result.summary(SLO(ttft_s=5.0, itl_s=1.0))
    assert s.slo_attainment == 1.0
    assert s.itl.p50 is not None
    assert 0.009 <= s.itl.p50 <= 0.05
    assert fake_engine.bodies[0]["prompt_tokens"] == 64
    assert fake_engine.bodies[0]["max_tokens"] == 10


async def test_failures_are_classified_not_swallowed(fake_engine: FakeEngine) -> None:
    cfg = LoadConfig(endpoints=(fake_engine.url,), request_timeout_s=1.0)
    statuses = {}
    for behaviour in ("http500", "truncate", "short", "error_event", "slow"):
        res = await run_load(burst(1), replace(cfg, model=behaviour))
        statuses[behaviour] = res.results[0]
    assert statuses["http500"].status == "http_error"
    assert statuses["http500"].http_status == 500
    assert statuses["truncate"].status == "truncated"
    assert statuses["truncate"].error == "stream ended without [DONE]"
    assert statuses["short"].status == "truncated"
    assert "4 of 8 tokens" in (statuses["short"].error or "")
    assert statuses["error_event"].status == "error"
    assert "engine died" in (statuses["error_event"].error or "")
    assert statuses["slow"].status == "timeout"


async def test_short_answers_are_fine_without_ignore_eos(fake_engine: FakeEngine) -> None:
    res = await run_load(burst(1), LoadConfig(endpoints=(fake_engine.url,), model="short", ignore_eos=False))
    assert res.results[0].status == "ok"
    assert res.results[0].output_tokens == 4


async def test_concurrency_is_bounded_and_waiting_is_recorded(fake_engine: FakeEngine) -> None:
    fake_engine.prefill_s = 0.05
    res = await run_load(burst(12), LoadConfig(endpoints=(fake_engine.url,), concurrency=3))
    assert all(r.status == "ok" for r in res.results)
    assert fake_engine.max_in_flight <= 3
    assert fake_engine.max_in_flight == 3
    assert max(r.client_queue_s for r in res.results) >= 0.1


async def test_round_robin_over_endpoints(fake_engines: list[FakeEngine]) -> None:
    urls = tuple(e.url for e in fake_engines)
    res = await run_load(burst(6), LoadConfig(endpoints=urls))
    assert [r.endpoint for r in res.results] == [urls[i % 2] for i in range(6)]
    assert len(fake_engines[0].bodies) == len(fake_engines[1].bodies) == 3


async def test_arrivals_follow_the_schedule(fake_engine: FakeEngine) -> None:
    res = await run_load(burst(4, every_s=0.2), LoadConfig(endpoints=(fake_engine.url,)))
    sent = [r.sent_at_s for r in res.results]
    assert sent == sorted(sent)
    assert sent[3] - sent[0] == pytest.approx(0.6, abs=0.1)
    assert all(abs(r.client_queue_s) < 0.1 for r in res.results)


async def test_duration_and_count_bound_the_run(fake_engine: FakeEngine) -> None:
    schedule = burst(100, every_s=0.1)
    res = await run_load(schedule, LoadConfig(endpoints=(fake_engine.url,), duration_s=0.45))
    assert res.dispatched == 5
    assert len(res.results) == 5
    res = await run_load(schedule, LoadConfig(endpoints=(fake_engine.url,), max_requests=3))
    assert res.dispatched == 3
    t0 = time.perf_counter()
    stuck = await run_load(
        burst(2), LoadConfig(endpoints=(fake_engine.url,), model="slow", drain_timeout_s=0.3, duration_s=0.1)
    )
    assert time.perf_counter() - t0 < 3.0
    assert [r.status for r in stuck.results] == ["cancelled", "cancelled"]


def test_public_endpoints_are_refused_unless_allowed() -> None:
    """Loopback and pod IPs (private networks) need no flag; the README's tour loads a pod IP."""
    local = ("http://127.0.0.1:8000", "http://127.9.8.7:1/", "http://localhost:1", "http://[::1]:2")
    pod_ips = ("http://10.244.1.7:8000", "http://172.20.0.5:8000", "http://192.168.3.4:80", "http://100.64.0.9:1")
    for url in (*local, *pod_ips, "http://[fd00::1]:8000"):
        assert check_endpoint(url, allow_remote=False) == url.rstrip("/")
    for url in (
        "http://8.8.8.8:8000",
        "http://example.com",
        "http://0.0.0.0:80",
        "http://169.254.169.254/",
        "http://172.32.0.1",
    ):
        with pytest.raises(RemoteEndpointError, match="allow-remote"):
            LoadConfig(endpoints=(url,))
        assert check_endpoint(url, allow_remote=True)
    with pytest.raises(ValueError, match="http"):
        check_endpoint("ftp://127.0.0.1/x", allow_remote=False)


def test_cli_runs_synthetic_load_and_writes_json(
    fake_engine: FakeEngine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run.json"
    code = main(
        [
            "--synthetic",
            "poisson",
            "--rate",
            "50",
            "--max-requests",
            "20",
            "--endpoint",
            fake_engine.url,
            "--input-tokens",
            "100",
            "--output-tokens",
            "5",
            "--ttft-slo",
            "2",
            "--itl-slo",
            "0.5",
            "--json",
            str(out),
            "--no-progress",
            "--prompt-text",
            "stub",
            "--fail-on-error",
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "requests 20  ok 20" in text
    assert "both: 100.0 %" in text
    data = json.loads(out.read_text())
    assert data["summary"]["ok"] == 20
    assert data["summary"]["slo_attainment"] == 1.0
    assert len(data["requests"]) == 20
    assert data["requests"][0]["output_tokens"] == 5
    assert fake_engine.bodies[0]["prompt"].startswith("request ")


def test_cli_replays_a_trace_file_time_compressed(fake_engine: FakeEngine, tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(
            json.dumps({"timestamp": i * 1000, "input_length": 600, "output_length": 3, "hash_ids": [0, i + 1]}) + "\n"
            for i in range(5)
        )
    )
    t0 = time.perf_counter()
    assert main(["--trace", str(trace), "--time-scale", "20", "--endpoint", fake_engine.url, "--no-progress"]) == 0
    assert time.perf_counter() - t0 < 3.0  # 4 s of trace at 20x
    assert len(fake_engine.bodies) == 5
    assert all(b["prompt_tokens"] == 600 for b in fake_engine.bodies)


def test_cli_errors_exit_2_and_fail_on_error_exits_1(
    fake_engine: FakeEngine, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["--synthetic", "poisson", "--rate", "1", "--max-requests", "1", "--endpoint", "http://8.8.8.8:80"]) == 2
    )
    assert "allow-remote" in capsys.readouterr().err
    assert main(["--synthetic", "poisson", "--rate", "1", "--endpoint", fake_engine.url]) == 2
    assert "--duration or --max-requests" in capsys.readouterr().err
    assert (
        main(
            [
                "--synthetic",
                "poisson",
                "--rate",
                "100",
                "--max-requests",
                "2",
                "--model",
                "http500",
                "--endpoint",
                fake_engine.url,
                "--fail-on-error",
                "--no-progress",
            ]
        )
        == 1
    )


def test_cli_describe_prints_schedule_without_sending(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "--synthetic",
                "gamma",
                "--cv",
                "2",
                "--rate",
                "10",
                "--duration",
                "30",
                "--endpoint",
                "http://127.0.0.1:9",
                "--describe",
            ]
        )
        == 0
    )
    assert "req/s" in capsys.readouterr().out


def test_progress_bar_renders_on_request(fake_engine: FakeEngine, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "--synthetic",
                "poisson",
                "--rate",
                "100",
                "--max-requests",
                "3",
                "--endpoint",
                fake_engine.url,
                "--progress",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "3/3 done" in err


def test_synthetic_schedule_is_reproducible_from_seed() -> None:
    assert synthetic(3.0, count=10, seed=4) == synthetic(3.0, count=10, seed=4)


def test_cli_prompt_token_field_name_is_configurable(fake_engine: FakeEngine) -> None:
    assert (
        main(
            [
                "--synthetic",
                "poisson",
                "--rate",
                "100",
                "--max-requests",
                "1",
                "--input-tokens",
                "77",
                "--endpoint",
                fake_engine.url,
                "--prompt-tokens-field",
                "n_prompt",
                "--no-progress",
            ]
        )
        == 0
    )
    assert fake_engine.bodies[0]["n_prompt"] == 77
    assert "prompt_tokens" not in fake_engine.bodies[0]


async def test_least_outstanding_router_prefers_the_idle_endpoint() -> None:
    from aiohttp import web

    hits = {"slow": 0, "fast": 0}

    def handler(kind: str, delay: float) -> Any:
        async def serve(request: web.Request) -> web.StreamResponse:
            hits[kind] += 1
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await asyncio.sleep(delay)
            chunk = {"choices": [{"text": "x", "index": 0, "finish_reason": "length"}]}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            await resp.write(b"data: [DONE]\n\n")
            return resp

        return serve

    runners = []
    urls = {}
    for kind, delay in (("slow", 0.5), ("fast", 0.01)):
        app = web.Application()
        app.router.add_post("/v1/completions", handler(kind, delay))
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        urls[kind] = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    try:
        schedule = [TraceRequest(i * 0.02, 8, 1) for i in range(40)]
        res = await run_load(schedule, LoadConfig(endpoints=(urls["slow"], urls["fast"]), router="least-outstanding"))
    finally:
        for runner in runners:
            await runner.cleanup()
    assert all(r.status == "ok" for r in res.results)
    assert hits["fast"] > 3 * hits["slow"], hits
