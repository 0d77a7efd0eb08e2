"""Admin API of a real agent process: auth (401), validation (400), concurrency (409), routing."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator

import pytest

from semipd.sim.engine.localpod import LocalPod, PodOptions, PodSet

OPTIONS = PodOptions(speedup=20.0, agent_args=["--prefill-min", "10", "--prefill-max", "90"])


@pytest.fixture(scope="module")
def shared_pod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalPod]:
    """One pod for the tests that must leave the split unchanged (each asserts it did)."""
    with PodSet(tmp_path_factory.mktemp("admin")) as pods:
        yield pods.make(OPTIONS)


@pytest.fixture
def pod(pod_factory: Callable[..., LocalPod]) -> LocalPod:
    return pod_factory(OPTIONS)


def split_of(pod: LocalPod) -> tuple[int, int]:
    status, body = pod.admin("GET", "/v1/split")
    assert status == 200
    return body["prefillPercent"], body["decodePercent"]


def test_healthz_and_readyz_need_no_token(shared_pod: LocalPod) -> None:
    assert shared_pod.admin("GET", "/healthz", auth=False)[0] == 200
    status, body = shared_pod.admin("GET", "/readyz", auth=False)
    assert (status, body["state"]) == (200, "running")


@pytest.mark.parametrize("auth", [False, "wrong-token", ""])
@pytest.mark.parametrize(("method", "path"), [("GET", "/v1/split"), ("GET", "/metrics"), ("PUT", "/v1/split")])
def test_missing_or_wrong_token_is_401_and_changes_nothing(
    shared_pod: LocalPod, auth: bool | str, method: str, path: str
) -> None:
    body = {"prefillPercent": 70} if method == "PUT" else None
    status, answer = shared_pod.admin(method, path, body, auth=auth)
    assert status == 401
    assert answer["reason"] == "Unauthorized"
    assert split_of(shared_pod) == (50, 100)


def test_non_bearer_scheme_is_401(shared_pod: LocalPod) -> None:
    req = urllib.request.Request(
        shared_pod.admin_url + "/v1/split", headers={"Authorization": f"Basic {shared_pod.token}"}
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 401


@pytest.mark.parametrize(
    ("raw", "message_part"),
    [
        (b"{not json", "not valid JSON"),
        (b"[60, 100]", "JSON object"),
        (b"{}", "at least one"),
        (b'{"prefillPercent": "60"}', "must be an integer"),
        (b'{"prefillPercent": 60.0}', "must be an integer"),
        (b'{"prefillPercent": true}', "must be an integer"),
        (b'{"prefillPercent": 5}', "outside 10..90"),
        (b'{"prefillPercent": 95}', "outside 10..90"),
        (b'{"decodePercent": 0}', "outside 1..100"),
        (b'{"decodePercent": 101}', "outside 1..100"),
        (b'{"prefill": 60}', "unknown field"),
    ],
)
def test_malformed_or_out_of_bounds_body_is_400_with_message(
    shared_pod: LocalPod, raw: bytes, message_part: str
) -> None:
    status, body = shared_pod.admin("PUT", "/v1/split", raw=raw)
    assert status == 400
    assert message_part in body["error"]
    assert split_of(shared_pod) == (50, 100)


def test_concurrent_switch_is_409_and_first_one_completes(pod: LocalPod) -> None:
    status, body = pod.put_split(70, wait=False)
    assert status == 202
    assert body["accepted"] == {"prefillPercent": 70, "decodePercent": 100}
    status, busy = pod.put_split(60)
    assert status == 409
    assert busy["reason"] == "SwitchInProgress"
    assert "70/100" in busy["error"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status, now = pod.admin("GET", "/v1/split")
        if now["pending"] is None:
            break
        time.sleep(0.05)
    assert (now["prefillPercent"], now["decodePercent"], now["switchesTotal"]) == (70, 100, 1)
    assert now["lastSwitch"]["to"] == {"prefillPercent": 70, "decodePercent": 100}


def test_same_split_is_a_no_op(shared_pod: LocalPod) -> None:
    status, body = shared_pod.put_split(50, 100)
    assert (status, body["changed"], body["switchesTotal"]) == (200, False, 0)


def test_partial_body_keeps_the_other_share(pod: LocalPod) -> None:
    status, body = pod.put_split(decode=80)
    assert status == 200, body
    assert (body["prefillPercent"], body["decodePercent"]) == (50, 80)
    assert body["activeWorker"]["percent"] == 50


def test_unknown_route_404_and_wrong_method_405(shared_pod: LocalPod) -> None:
    assert shared_pod.admin("GET", "/v1/nothing")[0] == 404
    status, body = shared_pod.admin("POST", "/v1/split", {"prefillPercent": 60})
    assert status == 405
    assert "POST" in body["error"]


def test_rotated_token_file_takes_effect(pod: LocalPod) -> None:
    old = pod.token
    pod.token = "rotated-token"
    pod.token_file.write_text("rotated-token\n")
    assert pod.admin("GET", "/v1/split", auth=old)[0] == 401
    assert pod.admin("GET", "/v1/split")[0] == 200


def test_metrics_expose_split_and_counters(shared_pod: LocalPod) -> None:
    text = shared_pod.metrics_text()
    assert "semipd_agent_prefill_share_ratio 0.5" in text
    assert "semipd_agent_decode_share_ratio 1.0" in text
    assert 'semipd_agent_info{engine="sim",switch_mode="standby_swap"} 1.0' in text
    assert "# TYPE semipd_agent_switch_duration_seconds histogram" in text


def test_readyz_follows_engine_health(pod_factory: Callable[..., LocalPod]) -> None:
    pod = pod_factory(start=False)
    pod.options.agent_args = ["--engine-health-url", f"{pod.engine_url}/no-such-path"]
    pod.start(wait_ready=False)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status, body = pod.admin("GET", "/healthz", auth=False)
        if status == 200 and body["state"] == "running":
            break
        time.sleep(0.05)
    assert body["state"] == "running"
    status, body = pod.admin("GET", "/readyz", auth=False)
    assert status == 503
    assert body["engine"] == "status 404"
