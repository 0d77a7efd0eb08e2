"""What a simulated fleet consists of: node pools of instances of one kind, and fleet-wide knobs.

`fleet_from_spec` derives it from an InferencePool spec the way the operator and the simulated
engine would: latency model per node pool (perf.resolve), instance kind and switch mode from the
engine kind's capabilities, metric bucket edges from the engine driver, start-up delay from the
latency model's restart cost plus a scheduling delay, KV-cache capacity per instance from
`policy.kvcache.kv_capacity_tokens` (so `nodePools[].kvCacheTokens` applies) and the spec's
`placement.kvCache`, which the simulated operator plans and the router honours.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from semipd.api.durations import to_seconds
from semipd.api.v1alpha1 import EngineKind, InferencePoolSpec
from semipd.engines import get_driver
from semipd.engines.capabilities import SwitchMode as EngineSwitchMode
from semipd.engines.promql import MetricSet
from semipd.perf import LatencyModel
from semipd.perf.resolve import latency_model_for
from semipd.policy.kvcache import kv_capacity_tokens
from semipd.sim.fleet.instance import InstanceConfig, SwitchMode
from semipd.sim.fleet.router import KVRouting, RouterConfig

SCHEDULING_DELAY_S = 10.0
"""Pod scheduling + container start before the engine begins loading [est]; the latency model's
restart cost (weights from a node-local cache, graph capture) comes on top."""

KV_LINK_GBS = 25.0
"""Per-accelerator KV-transfer bandwidth between disaggregated instances, GB/s (200 Gbps RDMA, the
Semi-PD paper's testbed B) [est]."""

KINDS = ("semipd", "colocated", "prefill", "decode")


@dataclass(frozen=True)
class PoolSetup:
    name: str
    model: LatencyModel
    kind: str
    """semipd | colocated | prefill (disaggregated) | decode (disaggregated)."""
    instance: InstanceConfig
    replicas: int
    min_replicas: int
    max_replicas: int
    metrics: MetricSet
    accelerators_per_replica: int = 1
    cost_per_hour: float = 1.0
    startup_s: float = 0.0
    capacity: int | None = None
    """Replicas the node pool has room for (None: max_replicas); more stay pending, unschedulable."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"pool {self.name}: unknown instance kind {self.kind!r} (want one of {KINDS})")
        if not self.min_replicas <= self.replicas <= self.max_replicas:
            raise ValueError(f"pool {self.name}: replicas {self.replicas} outside [{self.min_replicas}, "
                             f"{self.max_replicas}]")  # fmt: skip

    @property
    def role(self) -> str:
        return {"prefill": "prefill", "decode": "decode"}.get(self.kind, "serve")


@dataclass(frozen=True)
class FleetSetup:
    pools: tuple[PoolSetup, ...]
    ttft_slo_s: float
    itl_slo_s: float
    router: RouterConfig = field(default_factory=RouterConfig)
    prefix_cache: bool = False
    """Instances keep a prefix cache (needs hash_ids in the trace)."""
    prefix_cache_fraction: float = 1.0
    """Cache size as a fraction of the KV pool [est]."""
    kv_link_gbs: float = KV_LINK_GBS
    scrape_s: float = 15.0
    keep_s: float = 600.0
    """How much scrape history the simulated Prometheus keeps (the longest window a controller asks)."""
    drain_limit_s: float = 3600.0
    """After the last arrival, how long to wait for requests to finish before counting them unfinished."""
    sample_s: float = 15.0
    """Timeline sampling period."""
    seed: int = 0
    kv_spec: InferencePoolSpec | None = None
    """Spec whose `placement.kvCache` is re-planned by `plan_kv_placement` from the scraped KV usage
    and published to the router (None: no KV placement, the router ignores context length)."""
    kv_routing: KVRouting = KVRouting.LABELS
    """How the router applies the placement: context-range labels or pool weights."""
    kv_interval_s: float | None = None
    """Seconds between KV placement plans (None: the spec's autoscaling interval)."""
    kv_wait_s: float | None = None
    """Every instance's KV admission bound (InstanceConfig.kv_wait_s) unless the pool sets its own."""

    def pool(self, name: str) -> PoolSetup:
        for p in self.pools:
            if p.name == name:
                return p
        raise KeyError(name)

    def with_pool(self, name: str, **changes: Any) -> FleetSetup:
        return replace(self, pools=tuple(replace(p, **changes) if p.name == name else p for p in self.pools))


_COLOCATED_ENGINES = (EngineKind.VLLM, EngineKind.VLLM_ASCEND, EngineKind.MINDIE)


def default_startup_s(model: LatencyModel) -> float:
    return SCHEDULING_DELAY_S + model.restart_cost()


def fleet_from_spec(
    spec: InferencePoolSpec,
    *,
    replicas: Mapping[str, int] | None = None,
    capacity: Mapping[str, int] | None = None,
    startup_s: float | None = None,
    **fleet: Any,
) -> FleetSetup:
    """The fleet an InferencePool runs: one pool per node pool, starting at `replicas` (default min)."""
    pools = []
    for np in spec.node_pools:
        engine = spec.effective_engine(np)
        driver = get_driver(engine.kind)
        model = latency_model_for(spec, np)
        mode = driver.capabilities.switch_mode
        switch = {
            EngineSwitchMode.STANDBY_SWAP: SwitchMode.STANDBY_SWAP,
            EngineSwitchMode.RESTART: SwitchMode.RESTART,
        }.get(mode, SwitchMode.NONE)
        kind = "colocated" if engine.kind in _COLOCATED_ENGINES else "semipd"
        semi = spec.semi_pd
        x, y = (semi.initial_prefill_percent, semi.initial_decode_percent) if semi.enabled else (100, 100)
        cfg = InstanceConfig(
            context_length=spec.model.max_context_length,
            prefill_percent=x,
            decode_percent=y,
            switch_mode=switch if semi.enabled else SwitchMode.NONE,
            kv_capacity=kv_capacity_tokens(spec, np),
        )
        n = (replicas or {}).get(np.name, np.min_replicas)
        pools.append(
            PoolSetup(
                name=np.name,
                model=model,
                kind=kind,
                instance=cfg,
                replicas=max(np.min_replicas, min(np.max_replicas, n)),
                min_replicas=np.min_replicas,
                max_replicas=np.max_replicas,
                metrics=driver.metrics,
                accelerators_per_replica=np.accelerators_per_replica,
                cost_per_hour=np.cost_per_hour,
                startup_s=default_startup_s(model) if startup_s is None else startup_s,
                capacity=(capacity or {}).get(np.name),
            )
        )
    opts: dict[str, Any] = {"scrape_s": 15.0, "kv_spec": spec, **fleet}
    return FleetSetup(
        pools=tuple(pools),
        ttft_slo_s=to_seconds(spec.slo.ttft_p99),
        itl_slo_s=to_seconds(spec.slo.itl_p99),
        **opts,
    )
