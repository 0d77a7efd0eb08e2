"""The InferencePool API on a real apiserver with the real operator running against it.

Schema and CEL cases must be refused by `kubectl apply` naming the field; semantic cases are
accepted and the operator must set InvalidSpec naming the field. The operator log must never hold
a traceback, whatever we throw at it.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from e2e.operator_process import OperatorProcess, running_operator
from tests.api.invalid_cases import CASES, Invalid, base_pool

pytestmark = pytest.mark.e2e

NS = "api-e2e"


def _apply(cluster: Any, doc: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    result: subprocess.CompletedProcess[str] = cluster.kubectl(
        "apply", "-n", NS, "-f", "-", input=yaml.safe_dump(doc), check=False
    )
    return result


def _get(cluster: Any, name: str) -> dict[str, Any]:
    out = cluster.kubectl("get", "inferencepools.semipd.io", name, "-n", NS, "-o", "json").stdout
    doc: dict[str, Any] = json.loads(out)
    return doc


def _wait_condition(cluster: Any, name: str, type_: str, status: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        last = _get(cluster, name)
        conds = {c["type"]: c for c in (last.get("status") or {}).get("conditions", [])}
        cond = conds.get(type_)
        gen_ok = (last.get("status") or {}).get("observedGeneration") == last["metadata"]["generation"]
        if cond and cond["status"] == status and gen_ok:
            return cond
        time.sleep(0.5)
    raise AssertionError(f"{name}: {type_} never became {status}; last status {last.get('status')}")


@pytest.fixture(scope="module")
def operator(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    with running_operator(cluster, NS, tmp_path_factory.mktemp("operator"), resync="2s") as op:
        yield op


@pytest.mark.parametrize("case", [c for c in CASES if c.layer in {"schema", "cel"}], ids=lambda c: c.name)
def test_apiserver_refuses_naming_the_field(cluster: Any, operator: OperatorProcess, case: Invalid) -> None:
    result = _apply(cluster, case.manifest())
    assert result.returncode != 0, f"{case.name} was accepted"
    assert case.field in result.stderr, result.stderr


def test_valid_pool_is_accepted_and_progressing(cluster: Any, operator: OperatorProcess) -> None:
    doc = base_pool()
    result = _apply(cluster, doc)
    assert result.returncode == 0, result.stderr
    cond = _wait_condition(cluster, doc["metadata"]["name"], "InvalidSpec", "False")
    assert cond["reason"] == "SpecValid"
    obj = _get(cluster, doc["metadata"]["name"])
    assert obj["spec"]["semiPD"]["initialDecodePercent"] == 50, "server-side defaults were not applied"
    assert {p["name"] for p in obj["status"]["nodePools"]} == {"h200", "ascend"}
    table = cluster.kubectl("get", "sipool", "-n", NS).stdout
    for column in ("READY", "POOLS", "REPLICAS", "SPLIT", "TTFT-P99", "ITL-P99", "AGE"):
        assert column in table


@pytest.mark.parametrize("case", [c for c in CASES if c.layer == "semantic"], ids=lambda c: c.name)
def test_operator_sets_invalid_spec_naming_the_field(cluster: Any, operator: OperatorProcess, case: Invalid) -> None:
    result = _apply(cluster, case.manifest())
    assert result.returncode == 0, result.stderr
    cond = _wait_condition(cluster, case.name, "InvalidSpec", "True")
    assert case.field in cond["message"], cond
    ready = _wait_condition(cluster, case.name, "Ready", "False")
    assert ready["reason"] == "InvalidSpec"


def test_bad_edit_then_fix_recovers(cluster: Any, operator: OperatorProcess) -> None:
    doc = base_pool()
    doc["metadata"]["name"] = "edit-then-fix"
    assert _apply(cluster, doc).returncode == 0
    _wait_condition(cluster, "edit-then-fix", "InvalidSpec", "False")
    doc["spec"]["nodePools"][0]["acceleratorsPerReplica"] = 16
    assert _apply(cluster, doc).returncode == 0
    cond = _wait_condition(cluster, "edit-then-fix", "InvalidSpec", "True")
    assert "spec.nodePools[0].acceleratorsPerReplica" in cond["message"]
    doc["spec"]["nodePools"][0]["acceleratorsPerReplica"] = 1
    assert _apply(cluster, doc).returncode == 0
    _wait_condition(cluster, "edit-then-fix", "InvalidSpec", "False")
