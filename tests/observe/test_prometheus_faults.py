"""Prometheus faults against a real local HTTP server standing in for Prometheus.

Each fault (hung, 5xx, malformed JSON, a wrong result type, NaN or stale samples, a reply slower
than the timeout) must give MetricsAvailable=False with a reason naming it, hold replicas and
splits (fail-static: the healthy reading below would scale in), and clear on its own once the
server answers properly again.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from semipd.api.v1alpha1 import InferencePoolSpec
from semipd.context.pool import pool_facts
from semipd.observe import prometheus
from semipd.observe.fleet import fault_reason, observe_pool
from semipd.observe.prometheus import MetricsError, PrometheusSource
from semipd.policy.observation import Observation
from semipd.policy.planner import plan
from semipd.policy.state import ControllerState, Plan

TIMEOUT_S = 0.3
PODS = ("p-0", "p-1", "p-2")


class FakePrometheus(ThreadingHTTPServer):
    """Answers /api/v1/query per `mode`; a hung or slow reply waits on `release` (bounded)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.mode = "ok"
        self.release = threading.Event()
        self.requests = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


def vector(value: str, age_query: bool) -> dict[str, Any]:
    now = time.time()
    if age_query:
        return {"resultType": "vector", "result": [{"metric": {}, "value": [now, value]}]}
    return {"resultType": "vector", "result": [{"metric": {"pod": p}, "value": [now, value]} for p in PODS]}


class Handler(BaseHTTPRequestHandler):
    server: FakePrometheus

    def log_message(self, *_: Any) -> None:
        pass

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.server.requests += 1
        query = parse_qs(urlparse(self.path).query).get("query", [""])[0]
        age_query = "timestamp(" in query
        mode = self.server.mode
        if mode == "hung":
            self.server.release.wait(10)  # accepts, never answers in time
            return
        if mode == "slow":
            self.server.release.wait(TIMEOUT_S * 4)
        if mode == "http500":
            self._send(500, b'{"status":"error","error":"internal secret detail"}')
            return
        if mode == "http503":
            self._send(503, b"overloaded")
            return
        if mode == "not_json":
            self._send(200, b"{not json")
            return
        if mode == "no_data":
            self._send(200, b'{"status":"success"}')
            return
        if mode == "scalar":
            data: dict[str, Any] = {"resultType": "scalar", "result": [time.time(), "1"]}
        elif mode == "string_result":
            data = {"resultType": "string", "result": "x"}
        elif mode == "nan":
            data = vector("NaN", age_query)
        elif mode == "stale":
            data = vector("100000" if age_query else "0.01", age_query)
        else:  # ok, slow: light load, fresh samples
            data = vector("0.5" if age_query else "0.01", age_query)
        self._send(200, json.dumps({"status": "success", "data": data}).encode())


@pytest.fixture
def server() -> Iterator[FakePrometheus]:
    srv = FakePrometheus()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.release.set()
        srv.shutdown()
        srv.server_close()
        thread.join(5)


def spec() -> InferencePoolSpec:
    return InferencePoolSpec.model_validate(
        {
            "model": {"name": "m", "source": "hf://m/m"},
            "engine": {"kind": "sim"},
            "nodePools": [{"name": "h200", "accelerator": "nvidia", "minReplicas": 1, "maxReplicas": 6}],
            "slo": {"ttftP99": "1s", "itlP99": "60ms", "window": "30s"},
            "autoscaling": {"interval": "10s", "scaleDownStabilization": "60s"},
        }
    )


def pod(name: str) -> dict[str, Any]:
    cond = {"type": "Ready", "status": "True"}
    return {"metadata": {"name": name, "namespace": "ml"}, "status": {"phase": "Running", "conditions": [cond]}}


def evaluate(source: PrometheusSource) -> tuple[Observation, Plan, float]:
    s = spec()
    now = time.time()
    by_np = {"h200": [pod(p) for p in PODS]}
    splits = dict.fromkeys(PODS, (50, 50))
    t0 = time.monotonic()
    obs = asyncio.run(observe_pool(source, s, "ml", by_np, splits, now))
    took = time.monotonic() - t0
    # Slack for ten minutes: a healthy light-load reading scales h200 in from 3.
    state = ControllerState(slack_since={"*": now - 600}, last_scale={"h200": now - 600})
    return obs, plan(s, obs, state, {"h200": 3}, pool_facts(s).planner_contexts()), took


def test_the_healthy_reading_scales_in(server: FakePrometheus) -> None:
    obs, result, _ = evaluate(PrometheusSource(server.url, TIMEOUT_S))
    assert obs.available
    assert result.metrics_available, result.metrics_message
    assert result.replicas["h200"] < 3  # so holding at 3 below is a real fail-static


FAULTS = [
    ("hung", prometheus.TIMEOUT),
    ("slow", prometheus.TIMEOUT),
    ("http500", prometheus.HTTP_ERROR),
    ("http503", prometheus.HTTP_ERROR),
    ("not_json", prometheus.MALFORMED),
    ("no_data", prometheus.MALFORMED),
    ("scalar", prometheus.WRONG_TYPE),
    ("string_result", prometheus.WRONG_TYPE),
    ("nan", "NoSamples"),
    ("stale", "MetricsStale"),
]


@pytest.mark.parametrize(("mode", "reason"), FAULTS, ids=[m for m, _ in FAULTS])
def test_a_fault_holds_with_a_reason_naming_it_and_clears_alone(server: FakePrometheus, mode: str, reason: str) -> None:
    source = PrometheusSource(server.url, TIMEOUT_S)
    server.mode = mode
    obs, result, took = evaluate(source)
    assert not result.metrics_available
    assert (fault_reason(obs) or result.metrics_reason) == reason, result.metrics_message
    assert result.replicas == {"h200": 3}
    assert result.splits == ()
    assert "internal secret detail" not in result.metrics_message  # reply bodies stay out of status
    assert took < 3 * TIMEOUT_S * 3 + 2  # bounded: wait_for caps every query
    server.release.set()  # a hung handler lets go
    server.mode = "ok"
    server.release.clear()
    obs, result, _ = evaluate(source)  # the same client, nothing reset
    assert obs.available
    assert result.metrics_available, result.metrics_message
    assert fault_reason(obs) is None
    assert result.replicas["h200"] < 3


def test_refused_connection_is_unreachable() -> None:
    srv = FakePrometheus()
    url = srv.url
    srv.server_close()  # the port is now closed: connections are refused
    with pytest.raises(MetricsError) as err:
        asyncio.run(PrometheusSource(url, TIMEOUT_S).query("up"))
    assert err.value.fault == prometheus.UNREACHABLE
