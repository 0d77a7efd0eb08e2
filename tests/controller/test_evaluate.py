"""evaluate(): conditions, observedGeneration and idempotence, from raw input that may be garbage."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semipd.controller.evaluate import evaluate
from tests.api.cluster_facts import NODES, caps_of
from tests.api.invalid_cases import CASES, base_pool

NOW = "2026-12-02T10:00:00Z"
LATER = "2026-12-02T10:05:00Z"


def _conds(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def test_valid_spec_is_progressing() -> None:
    ev = evaluate(base_pool()["spec"], 3, None, NODES, caps_of, NOW)
    status = ev.status_patch()
    conds = _conds(status)
    assert status["observedGeneration"] == 3
    assert conds["InvalidSpec"]["status"] == "False"
    assert conds["Progressing"]["status"] == "True"
    assert conds["Ready"]["status"] == "False"
    assert conds["MetricsAvailable"]["status"] == "Unknown"
    assert set(conds) == {"Ready", "Progressing", "SLOMet", "MetricsAvailable", "Degraded", "InvalidSpec"}
    assert all(c["observedGeneration"] == 3 for c in status["conditions"])
    assert [p["name"] for p in status["nodePools"]] == ["h200", "ascend"]
    assert status["summary"]["pools"] == 2


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_invalid_spec_condition_names_the_field(case: Any) -> None:
    ev = evaluate(case.manifest()["spec"], 2, None, NODES, caps_of, NOW)
    conds = _conds(ev.status_patch())
    assert conds["InvalidSpec"]["status"] == "True"
    assert case.field in conds["InvalidSpec"]["message"]
    assert conds["Ready"]["reason"] == "InvalidSpec"


def test_invalid_edit_keeps_last_good_pool_status() -> None:
    good = evaluate(base_pool()["spec"], 1, None, NODES, caps_of, NOW).status_patch()
    bad = CASES[0].manifest()["spec"]
    after = evaluate(bad, 2, good, NODES, caps_of, LATER).status_patch()
    assert after["nodePools"] == good["nodePools"]
    assert _conds(after)["InvalidSpec"]["lastTransitionTime"] == LATER
    assert _conds(after)["Degraded"]["lastTransitionTime"] == NOW


def test_reevaluation_is_a_fixed_point() -> None:
    first = evaluate(base_pool()["spec"], 1, None, NODES, caps_of, NOW)
    second = evaluate(base_pool()["spec"], 1, first.status_patch(), NODES, caps_of, LATER)
    assert second.status_patch() == first.status_patch()
    assert second.transitions == []
    assert {t.type for t in first.transitions} == {
        "Ready",
        "Progressing",
        "SLOMet",
        "MetricsAvailable",
        "Degraded",
        "InvalidSpec",
    }


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["model", "engine", "nodePools", "slo", "semiPD", "placement", "x"]), json_values, max_size=6
    )
)
def test_garbage_specs_never_raise(raw: dict[str, Any]) -> None:
    ev = evaluate(raw, 1, None, NODES, caps_of, NOW)
    assert _conds(ev.status_patch())["InvalidSpec"]["status"] == "True"
