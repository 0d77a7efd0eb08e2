"""Per-node-pool facts of one InferencePool, resolved from its spec once per evaluation.

Driver, capabilities, switch mode, expert-map actuation and performance model of every node pool,
so the autoscaler's steps (SLO plan, expert and KV placement) and the fleet simulator read them
instead of re-deriving them from the spec. Sits above engines, perf and policy; below controller and sim.
"""

from semipd.context.pool import Actuation, NodePoolFacts, PoolFacts, actuation_of, pool_facts

__all__ = ["Actuation", "NodePoolFacts", "PoolFacts", "actuation_of", "pool_facts"]
