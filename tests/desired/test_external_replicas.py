"""autoscaling.mode external in the desired state: spec.replicas is left to an HPA or KEDA."""

from __future__ import annotations

from typing import Any

from semipd.desired import names
from semipd.desired.pool import desired_children
from semipd.desired.workload import REPLICAS_HANDOVER_SUFFIX, replicas_handover
from tests.desired.test_pool import OWNER, SETTINGS, _by_kind, _spec

MANAGER = "semipd-operator"


def test_external_mode_leaves_replicas_out_of_the_deployment_intent() -> None:
    spec = _spec()
    held = desired_children(
        OWNER, spec, token="t", replicas={"h200": 2, "ascend": 1}, settings=SETTINGS, gie_installed=True
    )
    free = desired_children(
        OWNER, spec, token="t", replicas={"h200": None, "ascend": None}, settings=SETTINGS, gie_installed=True
    )
    assert [d["spec"]["replicas"] for d in _by_kind(held, "Deployment")] == [2, 1]
    for dep in _by_kind(free, "Deployment"):
        assert "replicas" not in dep["spec"]
    # Everything else is the same intent: switching modes changes no pod template (no rollout).
    strip = [
        {**d, "spec": {k: v for k, v in d["spec"].items() if k != "replicas"}} for d in _by_kind(held, "Deployment")
    ]
    assert strip == _by_kind(free, "Deployment")


def live(replicas: int, owners: list[str]) -> dict[str, Any]:
    fields = [{"manager": m, "operation": "Apply", "fieldsV1": {"f:spec": {"f:replicas": {}}}} for m in owners]
    fields.append({"manager": "kube-controller-manager", "operation": "Update", "fieldsV1": {"f:status": {}}})
    name = names.workload_name(OWNER.name, "h200")
    return {"metadata": {"name": name, "namespace": OWNER.namespace, "managedFields": fields},
            "spec": {"replicas": replicas}}  # fmt: skip


def test_handover_keeps_the_current_replicas_only_while_we_are_their_only_owner() -> None:
    intent = replicas_handover(live(3, [MANAGER]), MANAGER)
    assert intent == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": names.workload_name(OWNER.name, "h200"), "namespace": OWNER.namespace},
        "spec": {"replicas": 3},
    }
    # Already held by the handover manager, an HPA or kubectl scale: nothing to do, nothing reverted.
    assert replicas_handover(live(3, [MANAGER, MANAGER + REPLICAS_HANDOVER_SUFFIX]), MANAGER) is None
    assert replicas_handover(live(5, ["kubectl"]), MANAGER) is None
    assert replicas_handover(live(5, ["horizontal-pod-autoscaler", MANAGER]), MANAGER) is None
    assert replicas_handover(None, MANAGER) is None
