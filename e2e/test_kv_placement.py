"""KV-cache placement end to end: real control plane, real Prometheus, agents and simulated engines
whose KV pools are the sizes the spec gives (`nodePools[].kvCacheTokens`).

An H200 pool (50k KV tokens per replica) and an Ascend pool (30k). Before the surge long prompts
go to the H200 pool (most headroom) and the pods carry llm-d's `context-length-range` labels saying
so. A long-context surge then fills the H200 KV cache: the operator moves the long prompts' weight to
the Ascend pool (decision `KVPlacement/LongContextPoolsMoved`, status weights, pod labels swapped),
and the test's router — which honours the labels as llm-d's context-length-aware filter does — sends
the next long prompts there. No request fails.

The Gateway API HTTPRoute CRD is not available here (only the GIE InferencePool CRD is, under
semipd/data/crds), so the HTTPRoute weights are covered by unit tests against the schema
(tests/desired/test_routing.py); this test checks that its absence costs nothing.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from e2e.fleet_load import LoadDriver
from e2e.harness import wait_until
from e2e.operator_process import running_operator
from semipd.controller.agents import ready_pod_ips
from semipd.load import LoadConfig, run_load
from semipd.traces import TraceRequest

pytestmark = pytest.mark.e2e

NS = "kv-e2e"
POOL = "kv"
MAX_CONTEXT = 16384
THRESHOLD = 4096
CAPACITY = {"h200": 50_000, "ascend": 30_000}
INTERVAL = 4.0
SLICE_S = 2.0
RANGE_LABEL = "llm-d.ai/context-length-range"
LONG = (8000, 800)  # prompt, output tokens
SHORT = (1000, 32)
RESULTS_LOG = Path("/tmp") / "semipd-kv-placement-e2e.json"

MANIFEST = {
    "apiVersion": "semipd.io/v1alpha1",
    "kind": "InferencePool",
    "metadata": {"name": POOL},
    "spec": {
        "model": {"name": "llama-3-8b", "source": "hf://meta-llama/Llama-3.1-8B-Instruct", "profile": "llama-3-8b",
                  "maxContextLength": MAX_CONTEXT},
        "engine": {"kind": "sim", "args": ["--load-time", "3"]},
        "nodePools": [
            {"name": "h200", "accelerator": "nvidia", "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"},
             "minReplicas": 1, "maxReplicas": 1, "kvCacheTokens": CAPACITY["h200"]},
            {"name": "ascend", "accelerator": "ascend", "nodeSelector": {"accelerator": "huawei-Ascend910"},
             "tolerations": [{"key": "huawei.com/Ascend910", "operator": "Exists", "effect": "NoSchedule"}],
             "minReplicas": 1, "maxReplicas": 1, "kvCacheTokens": CAPACITY["ascend"]},
        ],
        "slo": {"ttftP99": "5s", "itlP99": "100ms", "window": "10s"},
        "autoscaling": {"interval": f"{INTERVAL:.0f}s", "mode": "off"},
        "placement": {"kvCache": {"longContextThreshold": THRESHOLD, "hysteresis": 0.2}},
    },
}  # fmt: skip


class Mix:
    """Poisson arrivals of short and long prompts at adjustable rates."""

    def __init__(self, seed: int = 11) -> None:
        self.rates = {"short": 0.0, "long": 0.0}
        self._rng = random.Random(seed)

    def between(self, start: float, end: float) -> list[TraceRequest]:
        out = []
        for kind, shape in (("short", SHORT), ("long", LONG)):
            t, rate = 0.0, self.rates[kind]
            while rate > 0:
                t += self._rng.expovariate(rate)
                if t >= end - start:
                    break
                out.append(TraceRequest(t, *shape))
        return sorted(out, key=lambda r: r.arrival_s)


@dataclass
class Dispatch:
    at: float
    long: bool
    node_pools: tuple[str, ...]
    count: int


class ContextAwareDriver(LoadDriver):
    """The load driver as a context-length-aware router: a prompt goes to the Ready pods whose
    `llm-d.ai/context-length-range` label contains its length (unlabelled pods count as in range;
    with none in range, all pods), least-outstanding among them — llm-d's filter, reading live labels."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.dispatches: list[Dispatch] = []

    def routes(self) -> list[tuple[str, str, tuple[int, int] | None]]:
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=f"semipd.io/pool={self.pool}").items
        bodies = [self.core.api_client.sanitize_for_serialization(p) for p in pods if not p.metadata.deletion_timestamp]
        ips = ready_pod_ips(bodies)
        out = []
        for b in bodies:
            labels = b["metadata"].get("labels") or {}
            name = b["metadata"]["name"]
            if name not in ips:
                continue
            lo, _, hi = (labels.get(RANGE_LABEL) or "").partition("-")
            span = (int(lo), int(hi)) if lo.isdigit() and hi.isdigit() else None
            out.append((f"http://{ips[name]}:{self.port}", labels.get("semipd.io/node-pool", ""), span))
        return out

    async def _send(self, endpoints: list[str], schedule: list[TraceRequest]) -> None:
        cfg = LoadConfig(
            endpoints=tuple(endpoints), model=self.model, router="least-outstanding", concurrency=256,
            request_timeout_s=180.0, drain_timeout_s=180.0, prompt_text="stub",
        )  # fmt: skip
        res = await run_load(schedule, cfg)
        self.results.extend(res.results)

    async def _run(self) -> None:
        tasks: list[asyncio.Task[None]] = []  # one per slice and class: bounded by the test's length
        while not self._stop.is_set():
            routes = await asyncio.to_thread(self.routes)
            schedule = self.arrivals.between(self.elapsed, self.elapsed + self.slice_s)
            for long in (False, True):
                part = [r for r in schedule if (r.input_tokens > THRESHOLD) == long]
                if not part or not routes:
                    continue
                n = part[0].input_tokens
                inside = [(url, np) for url, np, span in routes if span is None or span[0] <= n <= span[1]]
                chosen = inside or [(url, np) for url, np, _ in routes]
                self.dispatches.append(
                    Dispatch(time.monotonic(), long, tuple(sorted({np for _, np in chosen})), len(part))
                )
                tasks.append(asyncio.create_task(self._send([url for url, _ in chosen], part)))
            await asyncio.sleep(self.slice_s)
            self.elapsed += self.slice_s
        await asyncio.gather(*tasks)


@dataclass
class Sample:
    at: float
    long_pools: list[str]
    long_weights: dict[str, int]
    long_share: float | None
    labels: dict[str, str | None]


@dataclass
class Recorder:
    """Samples the placement in status and the pods' range labels every 0.5 s (bounded)."""

    cluster: Any
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        custom = client.CustomObjectsApi(self.cluster.api())
        core = self.cluster.core()
        deadline = time.monotonic() + 900
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                obj = custom.get_namespaced_custom_object("semipd.io", "v1alpha1", NS, "inferencepools", POOL)
                kv = placement(obj)  # type: ignore[arg-type]
                pods = core.list_namespaced_pod(NS, label_selector=f"semipd.io/pool={POOL}").items
            except client.ApiException:
                time.sleep(0.5)
                continue
            self.samples.append(
                Sample(
                    time.monotonic(),
                    list(kv.get("longContextPools") or []),
                    {p["name"]: p.get("longWeight", 0) for p in kv.get("pools") or []},
                    kv.get("longRequestShare"),
                    {p.metadata.labels.get("semipd.io/node-pool"): p.metadata.labels.get(RANGE_LABEL) for p in pods},
                )
            )
            time.sleep(0.5)

    def start(self) -> None:
        threading.Thread(target=self.run, daemon=True).start()

    def stop(self) -> None:
        self._stop.set()


def pool(cluster: Any) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(
        cluster.kubectl("get", "inferencepools.semipd.io", POOL, "-n", NS, "-o", "json").stdout
    )
    return doc


def placement(obj: dict[str, Any]) -> dict[str, Any]:
    kv: dict[str, Any] = ((obj.get("status") or {}).get("placement") or {}).get("kvCache") or {}
    return kv


def kv_decisions(cluster: Any) -> list[dict[str, Any]]:
    return [d for d in (pool(cluster).get("status") or {}).get("decisions") or [] if d["action"] == "KVPlacement"]


def pod_labels(cluster: Any) -> dict[str, str | None]:
    pods = cluster.core().list_namespaced_pod(NS, label_selector=f"semipd.io/pool={POOL}").items
    return {p.metadata.labels.get("semipd.io/node-pool"): p.metadata.labels.get(RANGE_LABEL) for p in pods}


def headroom(detail: str) -> int:
    """`headroom 8000/50000 long 100% short 60%` -> 8000."""
    return int(detail.split()[1].split("/")[0])


@pytest.fixture(scope="module")
def fleet(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, ContextAwareDriver, Mix]]:
    with running_operator(cluster, NS, tmp_path_factory.mktemp("kv"), resync="5s", gie=True) as op:
        cluster.kubectl("apply", "-n", NS, "-f", "-", input=yaml.safe_dump(MANIFEST))
        wait_until(
            lambda: (
                {p["name"]: p["readyReplicas"] for p in (pool(cluster).get("status") or {}).get("nodePools", [])}
                == {"h200": 1, "ascend": 1}
            ),
            timeout=180,
            what="one Ready replica per node pool",
        )
        mix = Mix()
        load = ContextAwareDriver(cluster.core(), NS, POOL, mix, model="llama-3-8b", slice_s=SLICE_S)
        mix.rates["short"] = 1.0
        with load.running(RESULTS_LOG):
            yield op, load, mix


def test_long_prompts_start_on_the_pool_with_the_most_kv_headroom(cluster: Any, fleet: Any) -> None:
    op, _, _ = fleet
    kv = wait_until(
        lambda: (kv := placement(pool(cluster))).get("longContextPools") == ["h200"] and kv,
        timeout=60,
        what="long prompts placed on h200",
        on_timeout=lambda: json.dumps(pool(cluster).get("status"), indent=1)[:8000],
    )
    pools = {p["name"]: p for p in kv["pools"]}
    assert {n: p["capacityTokens"] for n, p in pools.items()} == CAPACITY
    assert {n: p["longWeight"] for n, p in pools.items()} == {"h200": 100, "ascend": 0}
    assert pools["h200"]["contextRange"] == f"0-{MAX_CONTEXT}"
    assert pools["ascend"]["contextRange"] == f"0-{THRESHOLD}"
    assert kv["threshold"] == THRESHOLD
    # The simulated engines' KV pools are the sizes the operator plans with.
    for name, cap in CAPACITY.items():
        got = cluster.prometheus_query(f'max(sglang:max_total_num_tokens{{namespace="{NS}",pod=~"{POOL}-{name}-.*"}})')
        assert got
        assert float(got[0]["value"][1]) == cap
    labels = wait_until(
        lambda: (lab := pod_labels(cluster)) == {"h200": f"0-{MAX_CONTEXT}", "ascend": f"0-{THRESHOLD}"} and lab,
        timeout=30,
        what="context-length-range labels on the pods",
        on_timeout=lambda: str(pod_labels(cluster)),
    )
    assert labels
    first = kv_decisions(cluster)
    assert first, "choosing the long-context pools is a recorded decision"
    assert first[-1]["details"]["longContextPools"] == "h200"
    # The pod template carries no changing label: a relabel never restarts pods.
    dep = cluster.apps().read_namespaced_deployment(f"{POOL}-h200", NS)
    assert RANGE_LABEL not in (dep.spec.template.metadata.labels or {})
    # Without the Gateway API CRD: GIE pools are owned, and the missing HTTPRoute kind is no error.
    gie = json.loads(
        cluster.kubectl("get", "inferencepools.inference.networking.k8s.io", "-n", NS, "-o", "json").stdout
    )
    assert sorted(i["metadata"]["name"] for i in gie["items"]) == [f"{POOL}-ascend", f"{POOL}-nvidia"]
    assert "httproutes" not in cluster.kubectl("api-resources", "--api-group=gateway.networking.k8s.io").stdout
    assert not op.tracebacks()


def test_long_context_surge_moves_long_prompts_to_the_pool_with_headroom(cluster: Any, fleet: Any) -> None:
    _, load, mix = fleet
    before = {d["time"] for d in kv_decisions(cluster)}
    recorder = Recorder(cluster)
    recorder.start()
    surge = time.monotonic()
    mix.rates["long"] = 1.5
    try:
        moved = wait_until(
            lambda: [
                d for d in kv_decisions(cluster)
                if d["time"] not in before and d["reason"] == "LongContextPoolsMoved"
                and d["details"]["longContextPools"] == "ascend"
            ],
            timeout=150,
            what="long prompts moved to ascend",
            on_timeout=lambda: json.dumps(placement(pool(cluster)), indent=1)[:6000],
        )[0]  # fmt: skip
        # The numbers behind the move: H200's free KV fell below Ascend's by more than the hysteresis.
        h200, ascend = headroom(moved["details"]["pool-h200"]), headroom(moved["details"]["pool-ascend"])
        assert ascend > h200 + 0.2 * CAPACITY["h200"], moved
        assert moved["details"]["previous"] == "h200"
        # Status and the pods' labels followed, together.
        swapped = wait_until(
            lambda: [
                s for s in recorder.samples
                if s.long_pools == ["ascend"] and s.long_weights == {"h200": 0, "ascend": 100}
                and s.labels == {"h200": f"0-{THRESHOLD}", "ascend": f"0-{MAX_CONTEXT}"}
            ],
            timeout=30,
            what="status weights and pod labels on ascend",
        )  # fmt: skip
        assert swapped[0].long_share is not None
        assert swapped[0].long_share > 0.2, "Prometheus' prompt-length histogram sees the surge"
        # The label-honouring router sent long prompts to ascend after the swap, and only to h200 before.
        wait_until(
            lambda: [d for d in load.dispatches if d.long and d.at >= swapped[0].at and d.node_pools == ("ascend",)],
            timeout=30,
            what="long prompts dispatched to ascend",
        )
        relabelled = next(s.at for s in recorder.samples if s.labels.get("ascend") == f"0-{MAX_CONTEXT}")
        early = [d for d in load.dispatches if d.long and d.at < relabelled - 1.0]
        assert early
        assert all(d.node_pools == ("h200",) for d in early), early
        peak = cluster.prometheus_query(
            f'max_over_time(max(sglang:token_usage{{namespace="{NS}",pod=~"{POOL}-h200-.*"}})[5m:2s])'
        )
        assert float(peak[0]["value"][1]) > 0.6, "the surge filled the H200 KV cache"
        print(
            f"surge -> labels swapped {relabelled - surge:.1f}s; at the move H200 headroom {h200} / Ascend {ascend}"
            f" tokens; peak H200 KV usage {float(peak[0]['value'][1]):.2f}; long share {swapped[0].long_share:.2f}"
        )
    finally:
        mix.rates["long"] = 0.0
        recorder.stop()
    moves = [s for a, s in zip(recorder.samples, recorder.samples[1:], strict=False) if a.long_pools != s.long_pools]
    print(f"long-context pool changes during the surge: {len(moves)} over {time.monotonic() - surge:.0f}s")
    # Surge over: the H200 cache drains and long prompts return to the pool with the most headroom.
    ended = time.monotonic()
    wait_until(
        lambda: (
            placement(pool(cluster)).get("longContextPools") == ["h200"]
            and pod_labels(cluster) == {"h200": f"0-{MAX_CONTEXT}", "ascend": f"0-{THRESHOLD}"}
        ),
        timeout=120,
        what="long prompts back on h200 after the surge",
    )
    print(f"surge end -> long prompts back on h200 in {time.monotonic() - ended:.1f}s")
    time.sleep(2 * SLICE_S)
    assert load.failures() == []
    long_ok = [r for r in load.results if r.input_tokens > THRESHOLD and r.status == "ok"]
    print(f"requests: {len(load.results)} ({len(long_ok)} long), all ok")
