"""v1alpha1 API: `InferencePoolSpec`, the whole desired state and its cross-field rules."""

from __future__ import annotations

from pydantic import Field

from semipd.api.base import ApiModel
from semipd.api.model_engine import Architecture, EngineSpec, ModelSpec
from semipd.api.nodepools import NodePool
from semipd.api.placement import PlacementSpec, RoutingSpec
from semipd.api.rules import Rule
from semipd.api.scaling import AutoscalingMode, AutoscalingSpec, SemiPDSpec, SLOSpec

# --------------------------------------------------------------------------- spec


class InferencePoolSpec(ApiModel):
    """Desired state of a semi-PD inference fleet."""

    __rules__ = (
        Rule(
            cel="size(self.nodePools) >= 1",
            message="at least one node pool is required",
            holds=lambda s: len(s.node_pools) >= 1,
            field_path=".nodePools",
        ),
        Rule(
            cel="self.nodePools.exists(p, p.maxReplicas >= 1)",
            message="at least one node pool needs maxReplicas >= 1 (with every pool at 0 nothing can ever serve)",
            holds=lambda s: any(p.max_replicas >= 1 for p in s.node_pools),
            field_path=".nodePools",
        ),
        Rule(
            cel="self.nodePools.all(p, self.nodePools.exists_one(q, q.name == p.name))",
            message="node pool names must be unique",
            holds=lambda s: len({p.name for p in s.node_pools}) == len(s.node_pools),
            field_path=".nodePools",
        ),
        Rule(
            cel="!self.placement.experts.enabled || self.model.architecture == 'moe'",
            message="expert placement needs an moe model",
            holds=lambda s: not s.placement.experts.enabled or s.model.architecture == Architecture.MOE,
            field_path=".placement.experts.enabled",
        ),
        Rule(
            cel="self.autoscaling.mode != 'semipd' || self.semiPD.enabled",
            message="autoscaling.mode semipd moves splits, so it needs semiPD.enabled (or use mode replicas)",
            holds=lambda s: s.autoscaling.mode != AutoscalingMode.SEMIPD or s.semi_pd.enabled,
            field_path=".autoscaling.mode",
        ),
    )

    model: ModelSpec
    """The model served."""

    engine: EngineSpec
    """The engine and its container settings (node pools may override parts)."""

    node_pools: list[NodePool] = Field(
        min_length=1,
        max_length=8,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    """Node pools replicas may run on (1 to 8, unique names)."""

    semi_pd: SemiPDSpec = Field(default_factory=SemiPDSpec, alias="semiPD")
    """Prefill/decode split control."""

    slo: SLOSpec
    """Latency objectives."""

    autoscaling: AutoscalingSpec = Field(default_factory=AutoscalingSpec)
    """Autoscaler settings."""

    placement: PlacementSpec = Field(default_factory=PlacementSpec)
    """KV-cache and expert placement."""

    routing: RoutingSpec = Field(default_factory=RoutingSpec)
    """Router integration (Gateway API Inference Extension)."""

    def node_pool(self, name: str) -> NodePool:
        """The node pool called `name` (KeyError if absent)."""
        for pool in self.node_pools:
            if pool.name == name:
                return pool
        raise KeyError(name)

    def effective_engine(self, pool: NodePool) -> EngineSpec:
        """The engine a node pool runs: the pool-wide spec with the pool's override applied."""
        if pool.engine is None:
            return self.engine
        fields = ("kind", "image", "args", "env", "resources")
        changes = {f: getattr(pool.engine, f) for f in fields if getattr(pool.engine, f) is not None}
        return self.engine.model_copy(update=changes)
