"""Every bad InferencePool is refused at its layer, naming the field — never by a crash."""

from __future__ import annotations

import pytest

from semipd.api.crd import open_api_schema
from semipd.api.semantics import parse_spec, semantic_problems
from tests.api.cluster_facts import NODES, caps_of
from tests.api.invalid_cases import CASES, Invalid, base_pool
from tests.api.offline_schema import admit

SPEC_SCHEMA = open_api_schema()["properties"]["spec"]


def test_there_are_at_least_fifteen_cases() -> None:
    assert len(CASES) >= 15
    assert len({c.name for c in CASES}) == len(CASES)


def test_base_pool_is_valid_everywhere() -> None:
    spec = base_pool()["spec"]
    assert admit(SPEC_SCHEMA, spec) == []
    parsed, problems = parse_spec(spec)
    assert problems == []
    assert parsed is not None
    assert semantic_problems(parsed, NODES, caps_of) == []


def _operator_problems(case: Invalid) -> list[str]:
    spec, problems = parse_spec(case.manifest()["spec"])
    if spec is not None:
        problems = semantic_problems(spec, NODES, caps_of)
    return [str(p) for p in problems]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_operator_names_the_field(case: Invalid) -> None:
    problems = _operator_problems(case)
    assert problems, f"{case.name} was accepted by the operator"
    assert any(p.startswith(case.field) for p in problems), problems


@pytest.mark.parametrize("case", [c for c in CASES if c.layer in {"schema", "cel"}], ids=lambda c: c.name)
def test_crd_schema_refuses_at_its_layer(case: Invalid) -> None:
    errors = admit(SPEC_SCHEMA, case.manifest()["spec"])
    assert errors, f"{case.name} passed the CRD schema and CEL"
    assert any(e.startswith(case.field) for e in errors), errors
    defaulted_schema_only = [e for e in errors if ": " in e]
    assert defaulted_schema_only


@pytest.mark.parametrize("case", [c for c in CASES if c.layer == "semantic"], ids=lambda c: c.name)
def test_semantic_cases_pass_the_schema(case: Invalid) -> None:
    # Only the operator can see these; the apiserver must accept them so the operator can say why.
    assert admit(SPEC_SCHEMA, case.manifest()["spec"]) == []
    spec, problems = parse_spec(case.manifest()["spec"])
    assert problems == []
    assert spec is not None
