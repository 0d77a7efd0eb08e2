"""`pool_facts(spec)`: what each node pool's engine is and can do, and the performance model of a replica."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from semipd.agent.drivers import DRIVERS as AGENT_DRIVERS
from semipd.api.v1alpha1 import EngineKind, EngineSpec, InferencePoolSpec, NodePool
from semipd.engines import EngineCapabilities, EngineDriver, SwitchMode, capabilities_of, get_driver
from semipd.perf import LatencyModel
from semipd.perf.resolve import latency_model_for
from semipd.policy.planner import PoolContext


class Actuation(StrEnum):
    """How a new expert map reaches one node pool's engines."""

    AGENT = "Agent"
    """The agent forwards it to the running engine (`PUT /v1/experts`)."""
    ROLLING_RESTART = "RollingRestart"
    """The engine reads the map at start-up: roll the Deployment."""
    ENGINE = "EngineRebalances"
    """The engine runs its own EPLB online; the operator sets only the redundancy."""
    NONE = "Unsupported"


def actuation_of(kind: str, capabilities: EngineCapabilities | None = None) -> Actuation:
    """The actuation path of an engine kind (from engines.capabilities and the agent's driver)."""
    caps = capabilities or capabilities_of(EngineKind(kind))
    agent = AGENT_DRIVERS.get(kind)
    if caps.supports_expert_rebalance and agent is not None and agent.supports_expert_rebalance:
        return Actuation.AGENT
    if caps.reads_expert_map_at_startup:
        return Actuation.ROLLING_RESTART
    if caps.supports_expert_rebalance:
        return Actuation.ENGINE
    return Actuation.NONE


@dataclass(frozen=True)
class NodePoolFacts:
    """One node pool: its effective engine, the driver for it, and a replica's performance model."""

    node_pool: NodePool
    engine: EngineSpec
    driver: EngineDriver
    model: LatencyModel
    actuation: Actuation

    @property
    def name(self) -> str:
        return self.node_pool.name

    @property
    def kind(self) -> str:
        return str(self.engine.kind.value)

    @property
    def capabilities(self) -> EngineCapabilities:
        return self.driver.capabilities

    def planner_context(self) -> PoolContext:
        """The split facts the SLO planner needs (model, split lever, cost of one change)."""
        restart = self.capabilities.switch_mode == SwitchMode.RESTART
        cost = self.model.restart_cost() if restart else self.model.switch_cost()
        itl_buckets = tuple(self.driver.metrics.itl_buckets)
        return PoolContext(self.model, self.capabilities.supports_split, cost, restart, itl_buckets)


@dataclass(frozen=True)
class PoolFacts:
    """Every node pool of one spec, in spec order."""

    node_pools: Mapping[str, NodePoolFacts]

    def __getitem__(self, name: str) -> NodePoolFacts:
        return self.node_pools[name]

    def planner_contexts(self) -> dict[str, PoolContext]:
        return {name: facts.planner_context() for name, facts in self.node_pools.items()}


def pool_facts(spec: InferencePoolSpec) -> PoolFacts:
    """Resolve every node pool once (raises ValueError when no performance model fits a node pool)."""
    out: dict[str, NodePoolFacts] = {}
    for np in spec.node_pools:
        engine = spec.effective_engine(np)
        driver = get_driver(engine.kind)
        out[np.name] = NodePoolFacts(
            np, engine, driver, latency_model_for(spec, np), actuation_of(engine.kind.value, driver.capabilities)
        )
    return PoolFacts(out)
