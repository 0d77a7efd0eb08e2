"""Prometheus endpoints stay under the operator's control: allow-list, bounded clients, no bodies in status."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from semipd.controller.config import load_config
from semipd.controller.promsource import MAX_CLIENTS, RefusedSource, allowed, choose_source
from semipd.observe.prometheus import MetricsError, PrometheusSource

DEFAULT = "http://prometheus.monitoring.svc:9090"
ALLOW = ("http://prom-a.monitoring.svc:9090", "https://thanos.example.com/tenant-1")


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("http://prom-a.monitoring.svc:9090", True),
        ("http://prom-a.monitoring.svc:9090/", True),
        ("http://PROM-A.monitoring.svc:9090/prometheus", True),
        ("https://thanos.example.com/tenant-1", True),
        ("https://thanos.example.com:443/tenant-1/api", True),
        ("https://thanos.example.com/tenant-10", False),
        ("https://thanos.example.com/", False),
        ("http://thanos.example.com/tenant-1", False),
        ("http://prom-a.monitoring.svc:9091", False),
        ("http://prom-a.monitoring.svc", False),
        ("http://prom-a.monitoring.svc:9090@169.254.169.254/", False),
        ("http://169.254.169.254/latest/meta-data", False),
        ("http://kubernetes.default.svc", False),
    ],
)
def test_allow_list_matches_scheme_host_port_and_path_prefix(url: str, ok: bool) -> None:
    assert allowed(url, ALLOW) is ok


def test_an_override_outside_the_list_is_refused_without_a_client() -> None:
    made: list[str] = []
    cache: dict[str, PrometheusSource] = {}

    def new(url: str) -> PrometheusSource:
        made.append(url)
        return RefusedSource(url, "fake")

    source = choose_source(cache, "http://169.254.169.254/", DEFAULT, (), new)
    assert isinstance(source, RefusedSource)
    assert "spec.autoscaling.prometheusURL" in source.reason
    assert made == []
    assert cache == {}
    assert choose_source(cache, None, DEFAULT, (), new).url == DEFAULT
    assert choose_source(cache, DEFAULT, DEFAULT, (), new).url == DEFAULT  # the default itself is always fine
    assert choose_source(cache, ALLOW[0], DEFAULT, ALLOW, new).url == ALLOW[0]
    assert made == [DEFAULT, ALLOW[0]]


async def test_a_refused_source_fails_every_query_naming_the_field() -> None:
    source = choose_source({}, "http://10.0.0.1:9090", DEFAULT, ALLOW)
    with pytest.raises(MetricsError, match=r"spec\.autoscaling\.prometheusURL"):
        await source.query("up")


def test_the_client_cache_is_a_bounded_lru() -> None:
    cache: dict[str, PrometheusSource] = {}
    allow = [f"http://prom-{i}.svc:9090" for i in range(3 * MAX_CLIENTS)]
    for url in allow:
        choose_source(cache, url, DEFAULT, allow, lambda u: RefusedSource(u, ""))
        choose_source(cache, None, DEFAULT, allow, lambda u: RefusedSource(u, ""))  # keeps the default hot
    assert len(cache) == MAX_CLIENTS
    assert DEFAULT in cache
    assert allow[-1] in cache
    assert allow[0] not in cache


def test_allow_list_setting() -> None:
    assert load_config({}).prometheus_allowed_urls == ()
    cfg = load_config({"SEMIPD_PROMETHEUS_ALLOWED_URLS": f" {ALLOW[0]} ,{ALLOW[1]}", "SEMIPD_SCRAPE_INTERVAL": "2s"})
    assert cfg.prometheus_allowed_urls == ALLOW
    assert cfg.scrape_interval == 2.0
    with pytest.raises(ValueError, match="SEMIPD_PROMETHEUS_ALLOWED_URLS"):
        load_config({"SEMIPD_PROMETHEUS_ALLOWED_URLS": "file:///etc/passwd"})


SECRET = "db-password=hunter2"


class _Leaky(BaseHTTPRequestHandler):
    """A Prometheus stand-in whose error and garbage responses carry a secret."""

    def do_GET(self) -> None:
        status, body = (400, SECRET) if "error" in self.path else (200, f"<html>{SECRET}</html>")
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def leaky() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Leaky)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(("prefix", "said"), [("/error", "HTTP 400"), ("/garbage", "unparseable response")])
async def test_status_messages_never_carry_the_response_body(leaky: str, prefix: str, said: str) -> None:
    with pytest.raises(MetricsError) as err:
        await PrometheusSource(leaky + prefix, timeout_s=2.0).query("up")
    assert said in str(err.value)
    assert "hunter2" not in str(err.value)


async def test_an_unreachable_prometheus_says_so_without_detail() -> None:
    with pytest.raises(MetricsError) as err:
        await PrometheusSource("http://127.0.0.1:1", timeout_s=1.0).query("up")
    assert "request failed (ConnectionError)" in str(err.value)
