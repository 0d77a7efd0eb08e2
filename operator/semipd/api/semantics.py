"""Checks on an InferencePool that the CRD schema cannot express, as a pure function.

The schema and CEL see one object; these rules also need the cluster's nodes (does a replica fit on
any node? do the pool's tolerations admit the tainted nodes?) and the engine drivers' capabilities
(can this engine split prefill/decode at all?). Each problem names the field to fix.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from pydantic import ValidationError

from semipd.api.durations import format_seconds, to_seconds
from semipd.api.v1alpha1 import NAME_RULE, EngineKind, InferencePoolSpec, NodePool, Toleration


@dataclass(frozen=True)
class SpecProblem:
    """One reason the spec cannot be served, with the JSON path of the field at fault."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass(frozen=True)
class Taint:
    """A node taint."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True)
class NodeInfo:
    """The parts of a Node the checks need (filled from the operator's node index)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[Taint] = ()
    unschedulable: bool = False


class EngineCapabilities(Protocol):
    """What the semantic checks need to know about an engine driver."""

    @property
    def supports_split(self) -> bool: ...

    @property
    def accelerators(self) -> frozenset[str]: ...


CapabilitiesOf = Callable[[EngineKind], EngineCapabilities]


def parse_spec(raw: Mapping[str, object]) -> tuple[InferencePoolSpec | None, list[SpecProblem]]:
    """Parse a raw `spec` dict; on failure return problems naming each bad field (`spec.nodePools[0].x`)."""
    try:
        return InferencePoolSpec.model_validate(raw), []
    except ValidationError as err:
        problems = []
        for e in err.errors():
            path = "spec" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e["loc"])
            path += (e.get("ctx") or {}).get("field_path", "")
            message = e["msg"].removeprefix("Value error, ")
            problems.append(SpecProblem(path, message))
        return None, problems


def name_problems(name: str) -> list[SpecProblem]:
    """The CRD's metadata.name rule, for objects that predate it."""
    if NAME_RULE.holds(name):
        return []
    return [SpecProblem("metadata.name", NAME_RULE.message)]


def _tolerates(tolerations: Sequence[Toleration], taint: Taint) -> bool:
    for tol in tolerations:
        if tol.effect is not None and tol.effect != taint.effect:
            continue
        if tol.operator == "Exists" and (tol.key is None or tol.key == taint.key):
            return True
        if tol.operator == "Equal" and tol.key == taint.key and (tol.value or "") == taint.value:
            return True
    return False


def _quantity_int(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        return 0  # extended resources are whole numbers; anything else cannot host a replica


def _check_pool_nodes(index: int, pool: NodePool, nodes: Sequence[NodeInfo]) -> list[SpecProblem]:
    at = f"spec.nodePools[{index}]"
    selected = [
        n for n in nodes if not n.unschedulable and all(n.labels.get(k) == v for k, v in pool.node_selector.items())
    ]
    if not selected:
        return []  # no matching nodes yet is a scheduling state (cluster autoscaler), not a spec error
    resource = pool.effective_resource_name()
    admitted = [
        n
        for n in selected
        if all(_tolerates(pool.tolerations, t) for t in n.taints if t.effect in {"NoSchedule", "NoExecute"})
    ]
    if not admitted:
        taints = sorted({f"{t.key}={t.value}:{t.effect}" for n in selected for t in n.taints})
        return [
            SpecProblem(
                f"{at}.tolerations",
                f"every node matching the nodeSelector is tainted ({', '.join(taints)}) "
                "and the pool tolerates none of them",
            )
        ]
    most = max(_quantity_int(n.allocatable.get(resource, "0")) for n in admitted)
    if most == 0:
        return [
            SpecProblem(
                f"{at}.resourceName",
                f"no node matching the nodeSelector advertises {resource}",
            )
        ]
    if pool.accelerators_per_replica > most:
        return [
            SpecProblem(
                f"{at}.acceleratorsPerReplica",
                f"{pool.accelerators_per_replica} x {resource} per replica exceeds the largest node's "
                f"allocatable ({most})",
            )
        ]
    return []


DEFAULT_SCRAPE_INTERVAL_S = 5.0
"""The scrape interval assumed when the operator is not told its own (SEMIPD_SCRAPE_INTERVAL)."""


def window_problems(spec: InferencePoolSpec, scrape_interval_s: float) -> list[SpecProblem]:
    """A window shorter than two scrapes holds at most one sample per series: no rate, no percentile."""
    if to_seconds(spec.slo.window) >= 2 * scrape_interval_s:
        return []
    return [
        SpecProblem(
            "spec.slo.window",
            f"window {spec.slo.window} is shorter than twice the scrape interval "
            f"({format_seconds(scrape_interval_s)}); use at least {format_seconds(2 * scrape_interval_s)}",
        )
    ]


def semantic_problems(
    spec: InferencePoolSpec,
    nodes: Sequence[NodeInfo],
    capabilities_of: CapabilitiesOf,
    *,
    scrape_interval_s: float = DEFAULT_SCRAPE_INTERVAL_S,
) -> list[SpecProblem]:
    """Everything that makes a schema-valid spec unservable on this cluster with these engines
    (and, given the operator's scrape interval, with its Prometheus)."""
    problems: list[SpecProblem] = window_problems(spec, scrape_interval_s)
    any_split = False
    for i, pool in enumerate(spec.node_pools):
        engine = spec.effective_engine(pool)
        caps = capabilities_of(engine.kind)
        kind_field = f"spec.nodePools[{i}].engine.kind" if pool.engine and pool.engine.kind else "spec.engine.kind"
        if pool.accelerator.value not in caps.accelerators:
            runs_on = ", ".join(sorted(caps.accelerators))
            problems.append(
                SpecProblem(
                    kind_field, f"engine {engine.kind.value} runs on {runs_on}, not on {pool.accelerator.value}"
                )
            )
        any_split = any_split or caps.supports_split
        problems.extend(_check_pool_nodes(i, pool, nodes))
    if spec.semi_pd.enabled and not any_split:
        problems.append(
            SpecProblem(
                "spec.semiPD.enabled",
                "no node pool's engine can split prefill and decode (use sglang-semipd, sglang or sim, "
                "or set semiPD.enabled to false)",
            )
        )
    return problems
