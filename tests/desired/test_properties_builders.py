"""Property: for every spec the schema and the operator accept, the desired-state builders never
raise (a DriverError is the one refusal reconcile turns into InvalidSpec) and every child they
build is owned, labelled, and accepted by the real Kubernetes schema."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from semipd.desired import names
from semipd.desired.owner import Owner
from semipd.desired.pool import desired_children
from semipd.desired.workload import WorkloadSettings
from semipd.engines import DriverError
from tests.api.spec_strategies import admitted, raw_specs

OWNER = Owner("prop", "ns", "uid-prop")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(raw=raw_specs(), data=st.data())
def test_children_of_every_admitted_spec_are_valid_kubernetes_objects(raw: dict[str, Any], data: st.DataObject) -> None:
    spec = admitted(raw)
    assume(spec is not None)
    assert spec is not None
    replicas = {np.name: data.draw(st.integers(np.min_replicas, np.max_replicas)) for np in spec.node_pools}
    try:
        children = desired_children(
            OWNER, spec, token="t0ken", replicas=replicas, settings=WorkloadSettings(), gie_installed=False
        )
    except DriverError:
        return  # reconcile reports it as InvalidSpec naming spec.engine, touching nothing
    assert children
    deployments = [c for c in children if c["kind"] == "Deployment"]
    assert sorted(d["spec"]["replicas"] for d in deployments) == sorted(replicas.values())
    for obj in children:
        meta = obj["metadata"]
        assert meta["labels"]["app.kubernetes.io/managed-by"] == names.MANAGED_BY
        assert any(r["uid"] == OWNER.uid and r.get("controller") for r in meta["ownerReferences"])
        kubernetes_validate.validate(obj, "1.35", strict=True)
