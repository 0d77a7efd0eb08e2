"""Hypothesis strategies for InferencePool specs the real schema accepts (property tests' inputs).

Specs are drawn around the shipped mixed GPU + Ascend example: engine kind, node pools, replica
bounds, costs, semi-PD bounds, SLOs and intervals vary. `admitted()` keeps only those the CRD
schema and CEL rules (offline stand-in) and the operator's semantic checks accept.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

from semipd.api.crd import open_api_schema
from semipd.api.semantics import parse_spec, semantic_problems
from semipd.api.v1alpha1 import EngineKind, InferencePoolSpec
from tests.api.cluster_facts import NODES, caps_of
from tests.api.invalid_cases import base_pool
from tests.api.offline_schema import admit

SPEC_SCHEMA = open_api_schema()["properties"]["spec"]
STATUS_SCHEMA = open_api_schema()["properties"]["status"]


@st.composite
def raw_specs(draw: st.DrawFn) -> dict[str, Any]:
    doc: dict[str, Any] = base_pool()["spec"]
    kind = draw(st.sampled_from(list(EngineKind)))
    doc["engine"] = (
        {"kind": "sim", "args": ["--speedup", "50"]}
        if kind == EngineKind.SIM
        else {"kind": kind.value, "image": "registry.example.com/e:1"}
    )
    chosen = draw(st.sampled_from([[0], [1], [0, 1]]))
    pools = [copy.deepcopy(doc["nodePools"][i]) for i in chosen]
    for np in pools:
        lo = draw(st.integers(0, 3))
        np["minReplicas"] = lo
        np["maxReplicas"] = draw(st.integers(max(lo, 1), 8))
        np["costPerHour"] = draw(st.floats(0.5, 50, allow_nan=False))
        np["acceleratorsPerReplica"] = draw(st.sampled_from([1, 2, 4]))
    doc["nodePools"] = pools
    lo = draw(st.integers(5, 50))
    hi = draw(st.integers(lo + 10, 95))
    doc["semiPD"] = {
        "initialPrefillPercent": draw(st.integers(lo, hi)),
        "minPrefillPercent": lo,
        "maxPrefillPercent": hi,
    }
    doc["slo"] = {
        "ttftP99": draw(st.sampled_from(["200ms", "1s", "2s", "5s"])),
        "itlP99": draw(st.sampled_from(["20ms", "60ms", "100ms"])),
        "window": draw(st.sampled_from(["10s", "30s", "1m"])),
    }
    doc["autoscaling"] = {
        "interval": draw(st.sampled_from(["5s", "15s", "1m"])),
        "scaleDownStabilization": draw(st.sampled_from(["30s", "1m", "5m"])),
    }
    return doc


def admitted(raw: dict[str, Any]) -> InferencePoolSpec | None:
    """The parsed spec if the apiserver and the operator would accept it, else None."""
    if admit(SPEC_SCHEMA, raw):
        return None
    spec, problems = parse_spec(raw)
    if spec is None or problems or semantic_problems(spec, NODES, caps_of):
        return None
    return spec
