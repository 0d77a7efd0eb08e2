"""The committed CRD is what the models generate, is structural, and admits the examples."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from semipd.api.crd import crd_filename, custom_resource_definition, open_api_schema
from semipd.api.rules import RuleModel
from semipd.api.structural import lint_schema
from tests.api.offline_schema import admit

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def test_committed_crd_matches_generator(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "semipd", "crds", "--output", str(tmp_path)], check=True, cwd=ROOT)
    generated = (tmp_path / crd_filename()).read_text()
    committed = (ROOT / "crds" / crd_filename()).read_text()
    assert generated == committed, "crds/ is stale: run `make crds` and commit"


def test_committed_api_reference_matches_the_models() -> None:
    from semipd.api.reference import reference_markdown

    assert (ROOT / "docs" / "api-reference.md").read_text() == reference_markdown(), "run `make crds`"


def test_schema_is_structural() -> None:
    assert lint_schema(open_api_schema()) == []


def test_linter_catches_non_structural_shapes() -> None:
    bad = {
        "type": "object",
        "properties": {
            "a": {"$ref": "#/x"},
            "b": {"type": "array", "items": {"type": "string", "maxLength": 3}, "uniqueItems": True},
            "c": {"type": "string"},
            "d": {"type": "object", "properties": {}, "additionalProperties": False},
            "e": {"type": "array", "maxItems": 2, "items": {"type": "object"}, "x-kubernetes-list-map-keys": ["k"]},
        },
    }
    problems = "\n".join(lint_schema(bad))
    for needle in (
        "'$ref'",
        "uniqueItems",
        "array without maxItems",
        "string without maxLength",
        "additionalProperties: false",
        "list-type: map",
        "every node needs a type",
    ):
        assert needle in problems


def test_crd_object_validates_against_apiextensions_v1() -> None:
    kubernetes_validate.validate(custom_resource_definition(), "1.35", strict=True)


def test_crd_has_status_subresource_columns_and_names() -> None:
    crd = custom_resource_definition()
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    assert [c["name"] for c in version["additionalPrinterColumns"]][:7] == [
        "Ready",
        "Pools",
        "Replicas",
        "Split",
        "TTFT-P99",
        "ITL-P99",
        "Age",
    ]
    assert crd["spec"]["names"]["shortNames"] == ["sipool"]
    assert crd["spec"]["names"]["categories"] == ["semipd"]
    conditions = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert set(conditions["items"]["required"]) == {"type", "status", "lastTransitionTime", "reason", "message"}


def test_descriptions_come_from_docstrings() -> None:
    spec = open_api_schema()["properties"]["spec"]
    ttft = spec["properties"]["slo"]["properties"]["ttftP99"]
    assert "time to first token" in ttft["description"]
    assert spec["properties"]["nodePools"]["items"]["properties"]["costPerHour"]["description"]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_pass_schema_and_cel(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    assert admit(open_api_schema()["properties"]["spec"], doc["spec"]) == []


def _all_rules() -> list[tuple[str, str]]:
    out = []
    stack: list[type[RuleModel]] = [RuleModel]
    while stack:
        cls = stack.pop()
        for sub in cls.__subclasses__():
            out += [(sub.__name__, r.cel) for r in sub.__rules__]
            stack.append(sub)
    return out


def test_every_rule_lands_in_the_crd() -> None:
    text = yaml.safe_dump(custom_resource_definition(), width=10_000)
    rules = _all_rules()
    assert len(rules) >= 15
    for owner, cel in rules:
        assert cel in text or yaml.safe_dump(cel, width=10_000).strip().strip("'") in text, (owner, cel)
