"""The pure heart of one reconcile: from (raw spec, generation, cluster facts, current status) to
the status the InferencePool should carry and the condition transitions worth an Event.

No Kopf, no client: `reconcile.py` gathers the inputs and applies the result.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from semipd.api.semantics import (
    DEFAULT_SCRAPE_INTERVAL_S,
    CapabilitiesOf,
    NodeInfo,
    SpecProblem,
    name_problems,
    parse_spec,
    semantic_problems,
)
from semipd.api.v1alpha1 import (
    ConditionStatus,
    InferencePoolSpec,
    InferencePoolStatus,
    NodePoolStatus,
    Observed,
    PrinterSummary,
)
from semipd.controller import conditions as c
from semipd.controller.rollout import PoolHealth
from semipd.controller.view import AutoscaleView

MAX_MESSAGE = 4096


@dataclass(frozen=True)
class Evaluation:
    """What one reconcile decided about an InferencePool."""

    spec: InferencePoolSpec | None
    problems: list[SpecProblem]
    status: InferencePoolStatus
    transitions: list[c.Transition]

    def status_patch(self) -> dict[str, Any]:
        """The status as a merge-patch body (camelCase, unset fields omitted)."""
        return self.status.model_dump(by_alias=True, exclude_none=True, mode="json")


def _message(problems: Sequence[SpecProblem]) -> str:
    text = "; ".join(str(p) for p in problems)
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


def _summary(current: InferencePoolStatus, pools: Sequence[NodePoolStatus]) -> PrinterSummary:
    splits = Counter(
        f"{s.prefill_percent}:{s.decode_percent}"
        for p in pools
        for s in p.splits
        if s.prefill_percent is not None and s.decode_percent is not None
    )
    ready = sum(p.ready_replicas for p in pools)
    desired = sum(p.desired_replicas for p in pools)
    return (current.summary or PrinterSummary()).model_copy(
        update={
            "pools": len(pools),
            "replicas": f"{ready}/{desired}",
            "split": splits.most_common(1)[0][0] if splits else "-",
        }
    )


def evaluate(
    raw_spec: Mapping[str, Any],
    generation: int | None,
    raw_status: Mapping[str, Any] | None,
    nodes: Sequence[NodeInfo],
    capabilities_of: CapabilitiesOf,
    now: str,
    *,
    name: str | None = None,
    health: PoolHealth | None = None,
    extra_problems: Sequence[SpecProblem] = (),
    autoscale: AutoscaleView | None = None,
    scrape_interval_s: float = DEFAULT_SCRAPE_INTERVAL_S,
) -> Evaluation:
    """Validate what the schema cannot and compute conditions; never raises on bad input.

    `health` (from the cached workloads) decides Ready/Progressing/Degraded once children exist;
    `extra_problems` are spec errors found while building them (e.g. an engine driver's refusal).
    """
    current = InferencePoolStatus.model_validate(dict(raw_status or {}))
    spec, problems = parse_spec(raw_spec)
    if spec is not None:
        problems = [
            *semantic_problems(spec, nodes, capabilities_of, scrape_interval_s=scrape_interval_s),
            *extra_problems,
        ]
    if name is not None:
        problems = [*name_problems(name), *problems]
    conds = list(current.conditions)

    def put(type: str, status: ConditionStatus, reason: str, message: str) -> None:
        nonlocal conds
        conds = c.set_condition(
            conds, type=type, status=status, reason=reason, message=message, generation=generation, now=now
        )

    if problems:
        msg = _message(problems)
        put(c.INVALID_SPEC, ConditionStatus.TRUE, "InvalidSpec", msg)
        put(c.READY, ConditionStatus.FALSE, "InvalidSpec", "the spec cannot be served; see InvalidSpec")
        put(c.PROGRESSING, ConditionStatus.FALSE, "InvalidSpec", "nothing is changed until the spec is fixed")
    elif health is None:
        put(c.INVALID_SPEC, ConditionStatus.FALSE, "SpecValid", "the spec passed all semantic checks")
        put(c.PROGRESSING, ConditionStatus.TRUE, "SpecAccepted", "the spec is valid; workloads are being reconciled")
        put(c.READY, ConditionStatus.FALSE, "WorkloadsNotReady", "no node pool has its minimum ready replicas yet")
    else:
        put(c.INVALID_SPEC, ConditionStatus.FALSE, "SpecValid", "the spec passed all semantic checks")
        for type, verdict in (
            (c.READY, health.ready),
            (c.PROGRESSING, health.progressing),
            (c.DEGRADED, health.degraded),
        ):
            value = ConditionStatus.TRUE if verdict.status else ConditionStatus.FALSE
            put(type, value, verdict.reason, verdict.message)
    if not problems and autoscale is not None and autoscale.metrics_available is not None:
        available = ConditionStatus.TRUE if autoscale.metrics_available else ConditionStatus.FALSE
        put(c.METRICS_AVAILABLE, available, autoscale.metrics_reason, autoscale.metrics_message)
        if autoscale.slo_met is None:
            put(c.SLO_MET, ConditionStatus.UNKNOWN, "NoLatencyData", autoscale.slo_message)
        else:
            met = ConditionStatus.TRUE if autoscale.slo_met else ConditionStatus.FALSE
            put(c.SLO_MET, met, "SLOMet" if autoscale.slo_met else "SLOMissed", autoscale.slo_message)
    for type in (c.SLO_MET, c.METRICS_AVAILABLE):
        if not any(x.type == type for x in conds):
            put(type, ConditionStatus.UNKNOWN, "NotObserved", "no observation has been taken yet")
    if not any(x.type == c.DEGRADED for x in conds):
        put(c.DEGRADED, ConditionStatus.FALSE, "AsExpected", "no pod is failing")

    pools = current.node_pools
    if health is not None and not problems:
        pools = health.node_pools
    elif spec is not None and not problems:
        pools = [
            NodePoolStatus(
                name=p.name,
                accelerator=p.accelerator.value,
                engine=spec.effective_engine(p).kind.value,
                split_supported=capabilities_of(spec.effective_engine(p).kind).supports_split,
            )
            for p in spec.node_pools
        ]
    summary = _summary(current, pools)
    observed, decisions, placement = current.observed, current.decisions, current.placement
    if autoscale is not None and not problems:
        if autoscale.observed is not None:
            observed = Observed.model_validate(autoscale.observed)
            summary = summary.model_copy(
                update={"ttft_p99": observed.ttft_p99 or "-", "itl_p99": observed.itl_p99 or "-"}
            )
        decisions = list(autoscale.decisions)
        placement = autoscale.placement() or placement
    status = current.model_copy(
        update={
            "observed_generation": generation,
            "conditions": sorted(conds, key=lambda x: c.ALL_TYPES.index(x.type) if x.type in c.ALL_TYPES else 99),
            "node_pools": pools,
            "summary": summary,
            "observed": observed,
            "decisions": decisions,
            "placement": placement,
        }
    )
    return Evaluation(spec, problems, status, c.transitions(current.conditions, status.conditions))
