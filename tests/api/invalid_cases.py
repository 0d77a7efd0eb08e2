"""Bad InferencePools, each one defect away from a valid base, and where each must be caught.

`layer` says who refuses it: `schema` (OpenAPI types, patterns, bounds), `cel` (our
x-kubernetes-validations) or `semantic` (the operator's InvalidSpec, which needs cluster facts).
`field` is the path the error must name. Unit tests and the e2e suite both iterate this table.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def base_pool() -> dict[str, Any]:
    """The mixed GPU + Ascend simulated pool: valid everywhere, with two node pools to break."""
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / "sim-mixed-gpu-ascend.yaml").read_text())
    return doc


@dataclass(frozen=True)
class Invalid:
    """One bad InferencePool."""

    name: str
    layer: str
    field: str
    changes: tuple[tuple[str, Any], ...]

    def manifest(self) -> dict[str, Any]:
        """The base pool with this case's changes applied (a value of DELETE removes the key)."""
        doc = base_pool()
        doc["metadata"]["name"] = self.name
        for path, value in self.changes:
            _set(doc, path, value)
        return doc


DELETE = object()


def _set(doc: Any, path: str, value: Any) -> None:
    keys: list[str | int] = [int(k) if k.isdigit() else k for k in path.split(".")]
    node = doc
    for key in keys[:-1]:
        node = node[key]
    last = keys[-1]
    if value is DELETE:
        del node[last]
    else:
        node[last] = copy.deepcopy(value)


_GPU_POOL = base_pool()["spec"]["nodePools"][0]

CASES: tuple[Invalid, ...] = (
    Invalid("bad-accelerator", "schema", "spec.nodePools[0].accelerator", (("spec.nodePools.0.accelerator", "tpu"),)),
    Invalid("bad-engine-kind", "schema", "spec.engine.kind", (("spec.engine.kind", "tgi"),)),
    Invalid("bad-duration", "schema", "spec.slo.ttftP99", (("spec.slo.ttftP99", "2 seconds"),)),
    Invalid("no-node-pools", "schema", "spec.nodePools", (("spec.nodePools", []),)),
    Invalid(
        "too-many-pools",
        "schema",
        "spec.nodePools",
        (("spec.nodePools", [{**_GPU_POOL, "name": f"p{i}"} for i in range(9)]),),
    ),
    Invalid("bad-pool-name", "schema", "spec.nodePools[0].name", (("spec.nodePools.0.name", "H200_Pool"),)),
    Invalid(
        "zero-accelerators",
        "schema",
        "spec.nodePools[0].acceleratorsPerReplica",
        (("spec.nodePools.0.acceleratorsPerReplica", 0),),
    ),
    Invalid("missing-slo", "schema", "spec.slo", (("spec.slo", DELETE),)),
    Invalid("source-not-uri", "schema", "spec.model.source", (("spec.model.source", "llama"),)),
    Invalid("attainment-above-one", "schema", "spec.slo.attainmentTarget", (("spec.slo.attainmentTarget", 1.5),)),
    Invalid(
        "min-above-max",
        "cel",
        "spec.nodePools[0]",
        (("spec.nodePools.0.minReplicas", 5), ("spec.nodePools.0.maxReplicas", 2)),
    ),
    Invalid("duplicate-pool-names", "cel", "spec.nodePools", (("spec.nodePools.1.name", "h200"),)),
    Invalid("moe-without-experts", "cel", "spec.model", (("spec.model.architecture", "moe"),)),
    Invalid("experts-on-dense", "cel", "spec.model", (("spec.model.experts", 8),)),
    Invalid("initial-above-max", "cel", "spec.semiPD", (("spec.semiPD.initialPrefillPercent", 95),)),
    Invalid(
        "experts-on-dense-placement",
        "cel",
        "spec.placement.experts.enabled",
        (("spec.placement", {"experts": {"enabled": True}}),),
    ),
    Invalid("real-engine-without-image", "cel", "spec.engine", (("spec.engine.kind", "sglang-semipd"),)),
    Invalid(
        "nvidia-pool-huawei-resource",
        "cel",
        "spec.nodePools[0]",
        (("spec.nodePools.0.resourceName", "huawei.com/Ascend910"),),
    ),
    Invalid(
        "same-http-and-admin-port", "cel", "spec.engine.ports", (("spec.engine.ports", {"http": 9090, "admin": 9090}),)
    ),
    Invalid(
        "env-value-and-valuefrom",
        "cel",
        "spec.engine.env[0]",
        (("spec.engine.env", [{"name": "X", "value": "1", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]),),
    ),
    Invalid(
        "semipd-mode-without-split",
        "cel",
        "spec.autoscaling.mode",
        (("spec.semiPD", {"enabled": False}),),
    ),
    # Hazards: schema-valid once, each broke the autoscaler or the pod (issue 13).
    Invalid("ttft-zero", "cel", "spec.slo.ttftP99", (("spec.slo.ttftP99", "0s"),)),
    Invalid("itl-zero", "cel", "spec.slo.itlP99", (("spec.slo.itlP99", "0ms"),)),
    Invalid("ttft-one-nanosecond", "cel", "spec.slo.ttftP99", (("spec.slo.ttftP99", "1ns"),)),
    Invalid("window-one-nanosecond", "cel", "spec.slo.window", (("spec.slo.window", "1ns"),)),
    Invalid("interval-zero", "cel", "spec.autoscaling.interval", (("spec.autoscaling.interval", "0s"),)),
    Invalid("interval-over-an-hour", "cel", "spec.autoscaling.interval", (("spec.autoscaling.interval", "2h"),)),
    Invalid("interval-never", "cel", "spec.autoscaling.interval", (("spec.autoscaling.interval", "99999h"),)),
    Invalid(
        "pending-timeout-zero", "cel", "spec.autoscaling.pendingTimeout", (("spec.autoscaling.pendingTimeout", "0s"),)
    ),
    Invalid(
        "every-pool-max-zero",
        "cel",
        "spec.nodePools",
        tuple((f"spec.nodePools.{i}.{k}", 0) for i in (0, 1) for k in ("minReplicas", "maxReplicas")),
    ),
    Invalid(
        "env-overrides-pod-ip",
        "cel",
        "spec.engine.env[0].name",
        (("spec.engine.env", [{"name": "POD_IP", "value": "0"}]),),
    ),
    Invalid(
        "pool-env-agent-variable",
        "cel",
        "spec.nodePools[0].engine.env[0].name",
        (("spec.nodePools.0.engine", {"env": [{"name": "SEMIPD_TOKEN", "value": "x"}]}),),
    ),
    Invalid("string-for-integer", "schema", "spec.nodePools[0].maxReplicas", (("spec.nodePools.0.maxReplicas", "3"),)),
    Invalid("string-for-boolean", "schema", "spec.semiPD.enabled", (("spec.semiPD.enabled", "yes"),)),
    Invalid(
        "quantity-not-a-number",
        "schema",
        "spec.engine.resources.requests.memory",
        (("spec.engine.resources", {"requests": {"memory": "lots"}}),),
    ),
    Invalid("window-below-two-scrapes", "semantic", "spec.slo.window", (("spec.slo.window", "9s"),)),
    Invalid(
        "too-many-accelerators",
        "semantic",
        "spec.nodePools[0].acceleratorsPerReplica",
        (("spec.nodePools.0.acceleratorsPerReplica", 16),),
    ),
    Invalid(
        "ascend-without-toleration",
        "semantic",
        "spec.nodePools[1].tolerations",
        (("spec.nodePools.1.tolerations", []),),
    ),
    Invalid(
        "split-on-colocated-engine",
        "semantic",
        "spec.semiPD.enabled",
        (("spec.engine", {"kind": "vllm", "image": "vllm/vllm-openai:v0.11.0"}), ("spec.nodePools", [_GPU_POOL])),
    ),
    Invalid(
        "ascend-engine-on-gpu",
        "semantic",
        "spec.engine.kind",
        (
            ("spec.engine", {"kind": "vllm-ascend", "image": "quay.io/ascend/vllm-ascend:v0.11.0"}),
            ("spec.semiPD", {"enabled": False}),
            ("spec.autoscaling", {"mode": "replicas"}),
            ("spec.nodePools", [_GPU_POOL]),
        ),
    ),
    Invalid(
        "resource-not-advertised",
        "semantic",
        "spec.nodePools[0].resourceName",
        (("spec.nodePools.0.resourceName", "nvidia.com/mig-1g.10gb"),),
    ),
)
