"""Every bad InferencePool is refused at its layer, naming the field — never by a crash.

Each case says which layer must refuse it: `schema` (the OpenAPI types and bounds refuse it),
`cel` (the schema admits it and one of our CEL rules refuses it), or `semantic` (the apiserver
admits it and only the operator's InvalidSpec can say why). The operator's own models refuse
every case too, naming the same field, so an object that predates a CRD rule is still caught.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from semipd import cli
from semipd.api.crd import open_api_schema
from semipd.api.semantics import DEFAULT_SCRAPE_INTERVAL_S, parse_spec, semantic_problems
from tests.api.cluster_facts import NODES, caps_of
from tests.api.invalid_cases import CASES, Invalid, base_pool
from tests.api.offline_schema import apply_defaults, cel_failures, schema_failures

SPEC_SCHEMA = open_api_schema()["properties"]["spec"]
LAYERS = ("schema", "cel", "semantic")


def test_there_are_at_least_fifteen_cases() -> None:
    assert len(CASES) >= 15
    assert len({c.name for c in CASES}) == len(CASES)
    assert {c.layer for c in CASES} == set(LAYERS)


def test_base_pool_is_valid_everywhere() -> None:
    spec = apply_defaults(SPEC_SCHEMA, base_pool()["spec"])
    assert schema_failures(SPEC_SCHEMA, spec) == []
    assert cel_failures(SPEC_SCHEMA, spec) == []
    parsed, problems = parse_spec(spec)
    assert problems == []
    assert parsed is not None
    assert semantic_problems(parsed, NODES, caps_of) == []


def _fields(messages: list[str]) -> list[str]:
    """The field path of each `path: message`."""
    return [m.split(": ", 1)[0] for m in messages]


def _refused_by(case: Invalid) -> tuple[str, list[str]]:
    """The first layer that refuses the case's spec, and the field paths it names."""
    spec = apply_defaults(SPEC_SCHEMA, case.manifest()["spec"])
    if errors := schema_failures(SPEC_SCHEMA, spec):
        return "schema", _fields(errors)
    if errors := cel_failures(SPEC_SCHEMA, spec):
        return "cel", _fields(errors)
    parsed, problems = parse_spec(spec)
    assert problems == [], f"the operator's models refuse what the CRD admits: {problems}"
    assert parsed is not None
    return "semantic", [p.field for p in semantic_problems(parsed, NODES, caps_of)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_refused_at_its_layer_naming_the_field(case: Invalid) -> None:
    layer, fields = _refused_by(case)
    assert fields, f"{case.name} passed every layer"
    assert layer == case.layer, f"{case.name} refused by {layer} ({fields}), expected {case.layer}"
    assert case.field in fields, f"{case.name}: {layer} named {fields}, not {case.field}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_operator_names_the_same_field(case: Invalid) -> None:
    # The operator's models and semantic checks see every case (an object may predate a CRD rule).
    spec, problems = parse_spec(case.manifest()["spec"])
    if spec is not None:
        assert case.layer == "semantic", f"{case.name}: the models admit what the {case.layer} layer refuses"
        problems = semantic_problems(spec, NODES, caps_of)
    fields = [re.sub(r"\.(int|str)$", "", p.field) for p in problems]  # a union names its failed branch
    assert case.field in fields, f"{case.name}: operator named {fields}"


def test_window_rule_follows_the_configured_scrape_interval() -> None:
    case = next(c for c in CASES if c.name == "window-below-two-scrapes")
    spec, _ = parse_spec(case.manifest()["spec"])
    assert spec is not None
    assert [p.field for p in semantic_problems(spec, NODES, caps_of, scrape_interval_s=DEFAULT_SCRAPE_INTERVAL_S)] == [
        "spec.slo.window"
    ]
    assert semantic_problems(spec, NODES, caps_of, scrape_interval_s=4.5) == []


def test_no_coercion_in_the_models() -> None:
    spec = base_pool()["spec"]
    for path, bad in (("maxReplicas", "3"), ("minReplicas", 1.0), ("maxReplicas", True)):
        pool = {**spec["nodePools"][0], path: bad}
        _, problems = parse_spec({**spec, "nodePools": [pool, spec["nodePools"][1]]})
        assert [p.field for p in problems] == [f"spec.nodePools[0].{path}"], (path, bad)
    _, problems = parse_spec({**spec, "semiPD": {"enabled": "yes"}})
    assert [p.field for p in problems] == ["spec.semiPD.enabled"]


# Offline there are no nodes: the cases that need the cluster's nodes are the operator's alone.
NEEDS_NODES = {"too-many-accelerators", "ascend-without-toleration", "resource-not-advertised"}


@pytest.mark.parametrize("case", [c for c in CASES if c.name not in NEEDS_NODES], ids=lambda c: c.name)
def test_semipd_validate_refuses_naming_the_field(
    case: Invalid, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "pool.yaml"
    manifest.write_text(yaml.safe_dump(case.manifest()))
    assert cli.main(["validate", str(manifest)]) == 1
    err = capsys.readouterr().err
    assert f": {case.name}: {case.field}" in err, err


def test_semipd_validate_accepts_the_examples(capsys: pytest.CaptureFixture[str]) -> None:
    examples = sorted(str(p) for p in (Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))
    assert cli.main(["validate", *examples]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out.count(": valid") >= 3
