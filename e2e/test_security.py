"""Least privilege on the real control plane, tried as an attacker holding the operator's token.

The chart's RBAC and ValidatingAdmissionPolicy are installed (namespaced mode); a TokenRequest
token of the operator's real ServiceAccount then tries every verb on a foreign Secret, a foreign
pod and kube-system objects: each is denied, and no response carries the Secret's data. A control
shows the policy lets the operator write what it owns. Then the operator meets a pre-existing
Secret, Deployment and Service with its children's names: they stay byte-identical, and the pool
reports the conflict with one Event.
"""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from e2e.harness import wait_until
from e2e.harness.config import binary
from e2e.operator_process import OperatorProcess, install_crds, running_operator
from tests.api.invalid_cases import base_pool

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "semipd-operator"
RUN = uuid.uuid4().hex[:6]
OPS_NS = f"semipd-sec-ops-{RUN}"
POOL_NS = f"semipd-sec-pools-{RUN}"
OTHER_NS = f"semipd-sec-other-{RUN}"
RELEASE = f"sec{RUN}"
SA_NAME = f"{RELEASE}-semipd-operator"
PASSWORD = "hunter2-" + RUN
LEAKS = (PASSWORD, base64.b64encode(PASSWORD.encode()).decode())
RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
              "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}  # fmt: skip
OWNER_REF = {"apiVersion": "semipd.io/v1alpha1", "kind": "InferencePool", "name": "x", "controller": True,
             "uid": "00000000-0000-0000-0000-000000000000"}  # fmt: skip
OURS = {"labels": {"app.kubernetes.io/managed-by": "semipd-operator"}, "ownerReferences": [OWNER_REF]}


def kubectl_json(cluster: Any, *args: str) -> Any:
    return json.loads(cluster.kubectl(*args, "-o", "json").stdout)


def secret(name: str, ns: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns},
            "stringData": {"password": PASSWORD}}  # fmt: skip


def pod(name: str, ns: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": {"app": "x"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}],
                     "nodeSelector": {"semipd.io/none": "none"}}}  # fmt: skip


@pytest.fixture(scope="module")
def installed(cluster: Any) -> Iterator[None]:
    """The chart's ServiceAccount, RBAC and admission policy (nothing else), as `helm template` renders them."""
    for ns in (OPS_NS, POOL_NS, OTHER_NS):
        cluster.ensure_namespace(ns)
    rendered = subprocess.run(
        [str(binary("helm")), "template", RELEASE, str(CHART), "-n", OPS_NS, "--kube-version", "1.35.0",
         "--set", f"watchNamespaces={{{POOL_NS}}}"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    docs = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] in RBAC_KINDS]
    assert {d["kind"] for d in docs} == RBAC_KINDS
    manifest = yaml.safe_dump_all(docs)
    cluster.kubectl("apply", "-f", "-", input=manifest)
    for obj in (secret("victim", POOL_NS), secret("victim", OTHER_NS), pod("bystander", POOL_NS),
                pod("bystander", OTHER_NS)):  # fmt: skip
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(obj))
    cluster.kubectl("create", "configmap", "foreign", "-n", POOL_NS, "--from-literal=k=v", check=False)
    try:
        yield
    finally:
        cluster.kubectl("delete", "-f", "-", "--wait=false", input=manifest, check=False)
        for ns in (OPS_NS, POOL_NS, OTHER_NS):
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.fixture(scope="module")
def api(cluster: Any, installed: None) -> Iterator[httpx.Client]:
    """An API client holding a real TokenRequest token of the operator's ServiceAccount."""
    token = cluster.kubectl("create", "token", SA_NAME, "-n", OPS_NS, "--duration=10m").stdout.strip()
    tls = ssl.create_default_context(cafile=str(cluster.ca_file))
    with httpx.Client(base_url=cluster.api_url, verify=tls, timeout=10,
                      headers={"Authorization": f"Bearer {token}"}) as client:  # fmt: skip
        who = client.post("/apis/authentication.k8s.io/v1/selfsubjectreviews",
                          json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})  # fmt: skip
        assert who.json()["status"]["userInfo"]["username"] == f"system:serviceaccount:{OPS_NS}:{SA_NAME}"
        # RBAC and admission policies take effect within a moment of being created.
        wait_until(lambda: client.get(f"/api/v1/namespaces/{POOL_NS}/pods").status_code == 200, timeout=30,
                   what="the operator's Role in effect")  # fmt: skip
        # A dry-run write the policy refuses: it shows the policy loaded, without changing anything.
        wait_until(lambda: client.patch(f"/api/v1/namespaces/{POOL_NS}/pods/bystander", params={"dryRun": "All"},
                                        content='{"metadata":{"labels":{"a":"b"}}}', headers=MERGE).status_code == 403,
                   timeout=30, what="the admission policy in effect")  # fmt: skip
        yield client


MERGE = {"Content-Type": "application/merge-patch+json"}
APPLY = {"Content-Type": "application/apply-patch+yaml"}


def attempts(cluster: Any) -> list[tuple[str, str, str, Any, dict[str, str]]]:
    """(what, method, path, body, headers): every verb on every foreign object."""
    out: list[tuple[str, str, str, Any, dict[str, str]]] = []
    for ns in (POOL_NS, OTHER_NS, "kube-system"):
        base = f"/api/v1/namespaces/{ns}/secrets"
        full = secret("victim", ns)
        out += [
            (f"get secret {ns}", "GET", f"{base}/victim", None, {}),
            (f"list secrets {ns}", "GET", base, None, {}),
            (f"watch secrets {ns}", "GET", f"{base}?watch=1&timeoutSeconds=1", None, {}),
            (f"empty patch secret {ns}", "PATCH", f"{base}/victim", {}, MERGE),
            (f"label patch secret {ns}", "PATCH", f"{base}/victim", {"metadata": OURS}, MERGE),
            (f"apply secret {ns}", "PATCH", f"{base}/victim?fieldManager=x&force=true",
             {**full, "metadata": {**full["metadata"], **OURS}}, APPLY),
            (f"update secret {ns}", "PUT", f"{base}/victim", full, {}),
            (f"create colliding secret {ns}", "POST", base, {**full, "metadata": {**full["metadata"], **OURS}}, {}),
            (f"delete secret {ns}", "DELETE", f"{base}/victim", None, {}),
        ]  # fmt: skip
    for ns in (POOL_NS, OTHER_NS):
        base = f"/api/v1/namespaces/{ns}/pods"
        out += [
            (f"get pod {ns}", "GET", f"{base}/bystander", None, {}),
            (f"patch pod image {ns}", "PATCH", f"{base}/bystander",
             {"spec": {"containers": [{"name": "c", "image": "evil"}]}}, MERGE),
            (f"patch pod labels {ns}", "PATCH", f"{base}/bystander?dryRun=All",
             {"metadata": {"labels": {"a": "b"}}}, MERGE),
            (f"update pod {ns}", "PUT", f"{base}/bystander", pod("bystander", ns), {}),
            (f"delete pod {ns}", "DELETE", f"{base}/bystander", None, {}),
            (f"create pod {ns}", "POST", base, pod("intruder", ns), {}),
        ]  # fmt: skip
    out.append(("list pods other", "GET", f"/api/v1/namespaces/{OTHER_NS}/pods", None, {}))
    out.append(("patch foreign configmap", "PATCH", f"/api/v1/namespaces/{POOL_NS}/configmaps/foreign",
                {"data": {"k": "evil"}}, MERGE))  # fmt: skip
    ks = "/api/v1/namespaces/kube-system/configmaps"
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "coredns-x", "namespace": "kube-system", **OURS},
    }
    dep = {"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "miner", "namespace": "kube-system", **OURS},
           "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}},
                    "spec": {"containers": [{"name": "c", "image": "evil"}]}}}}  # fmt: skip
    out += [
        ("get kube-system configmap", "GET", f"{ks}/kube-root-ca.crt", None, {}),
        ("list kube-system configmaps", "GET", ks, None, {}),
        ("patch kube-system configmap", "PATCH", f"{ks}/kube-root-ca.crt", {}, MERGE),
        ("create kube-system configmap", "POST", ks, cm, {}),
        ("create kube-system deployment", "POST", "/apis/apps/v1/namespaces/kube-system/deployments", dep, {}),
        ("list kube-system pods", "GET", "/api/v1/namespaces/kube-system/pods", None, {}),
    ]
    return out


def test_every_verb_on_foreign_objects_is_denied_and_leaks_nothing(cluster: Any, api: httpx.Client) -> None:
    before = {ns: kubectl_json(cluster, "get", "secret", "victim", "-n", ns) for ns in (POOL_NS, OTHER_NS)}
    allowed = []
    for what, method, path, body, headers in attempts(cluster):
        content = None if body is None else json.dumps(body)
        resp = api.request(method, path, content=content, headers=headers)
        leaked = [s for s in LEAKS if s in resp.text]
        assert not leaked, f"{what}: {resp.status_code} response carries the Secret's data"
        if resp.status_code < 400 or (resp.status_code == 404 and "victim" in path):
            allowed.append(f"{what}: {resp.status_code} {resp.text[:200]}")
        elif resp.status_code == 409:  # AlreadyExists: a Status, no object
            assert resp.json()["kind"] == "Status", what
    assert allowed == []
    for ns, was in before.items():
        assert kubectl_json(cluster, "get", "secret", "victim", "-n", ns) == was, f"victim in {ns} changed"
    live_pod = kubectl_json(cluster, "get", "pod", "bystander", "-n", POOL_NS)
    assert live_pod["spec"]["containers"][0]["image"] == "busybox"
    assert cluster.kubectl("get", "deployment", "miner", "-n", "kube-system", check=False).returncode != 0


def real_owner(cluster: Any) -> dict[str, Any]:
    """`OURS` with the ownerReference of a real InferencePool: the garbage collector deletes a dependent
    whose owner does not exist, which would race the patches below. No operator serves POOL_NS here."""
    install_crds(cluster, gie=False)
    doc = {**base_pool(), "metadata": {"name": "owner", "namespace": POOL_NS}}
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))
    uid = kubectl_json(cluster, "get", "inferencepools.semipd.io", "owner", "-n", POOL_NS)["metadata"]["uid"]
    return {**OURS, "ownerReferences": [{**OWNER_REF, "name": "owner", "uid": uid}]}


def test_the_policy_denies_what_rbac_allows_and_lets_the_operator_write_its_own(
    cluster: Any, api: httpx.Client
) -> None:
    # RBAC alone would allow this patch (pods: patch in a served namespace): the admission policy refuses it.
    resp = api.patch(f"/api/v1/namespaces/{POOL_NS}/pods/bystander", content='{"metadata":{"labels":{"a":"b"}}}',
                     headers=MERGE)  # fmt: skip
    assert resp.status_code == 403
    assert "ValidatingAdmissionPolicy" in resp.text, resp.text
    # An object carrying our label and an InferencePool ownerReference is ours to create and change.
    meta = {"name": "ours", "namespace": POOL_NS, **real_owner(cluster)}
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}
    created = api.post(f"/api/v1/namespaces/{POOL_NS}/configmaps", json=cm)
    assert created.status_code == 201, created.text
    patched = api.patch(f"/api/v1/namespaces/{POOL_NS}/configmaps/ours", content='{"data":{"k":"v"}}', headers=MERGE)
    assert patched.status_code == 200, patched.text
    unlabel = '{"metadata":{"labels":{"app.kubernetes.io/managed-by":null}}}'
    stripped = api.patch(f"/api/v1/namespaces/{POOL_NS}/configmaps/ours", content=unlabel, headers=MERGE)
    assert stripped.status_code == 403, stripped.text


# --- colliding names ----------------------------------------------------------------------------------

COLLIDE_NS = f"semipd-sec-collide-{RUN}"
POOL = "shop"


def foreign_objects() -> list[dict[str, Any]]:
    labels = {"app": "shop"}
    return [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{POOL}-agent-token", "namespace": COLLIDE_NS},
         "stringData": {"db-password": PASSWORD}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": f"{POOL}-h200", "namespace": COLLIDE_NS},
         "spec": {"replicas": 0, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels},
                               "spec": {"containers": [{"name": "c", "image": "shop"}]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"{POOL}-engines", "namespace": COLLIDE_NS},
         "spec": {"selector": labels, "ports": [{"port": 80}]}},
    ]  # fmt: skip


@pytest.fixture(scope="module")
def collide_operator(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    with running_operator(cluster, COLLIDE_NS, tmp_path_factory.mktemp("operator"), resync="2s") as op:
        yield op


def snapshot(cluster: Any) -> dict[str, Any]:
    return {o["kind"]: kubectl_json(cluster, "get", o["kind"].lower(), o["metadata"]["name"], "-n", COLLIDE_NS)
            for o in foreign_objects()}  # fmt: skip


def test_colliding_foreign_objects_stay_identical_and_the_pool_reports_the_conflict(
    cluster: Any, collide_operator: OperatorProcess
) -> None:
    for obj in foreign_objects():
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(obj))
    before = snapshot(cluster)
    doc = base_pool()
    doc["metadata"]["name"] = POOL
    cluster.kubectl("apply", "-n", COLLIDE_NS, "-f", "-", input=yaml.safe_dump(doc))

    def degraded() -> dict[str, Any] | None:
        obj = kubectl_json(cluster, "get", "inferencepools.semipd.io", POOL, "-n", COLLIDE_NS)
        conds = {c["type"]: c for c in (obj.get("status") or {}).get("conditions", [])}
        cond = conds.get("Degraded", {})
        return cond if cond.get("status") == "True" and cond.get("reason") == "Conflict" else None

    cond = wait_until(degraded, timeout=60, what="Degraded=True reason Conflict")
    for name in (f"Secret {COLLIDE_NS}/{POOL}-agent-token", f"Deployment {COLLIDE_NS}/{POOL}-h200",
                 f"Service {COLLIDE_NS}/{POOL}-engines"):  # fmt: skip
        assert name in cond["message"], cond["message"]
    assert "semipd.io/adopt=shop" in cond["message"]
    time.sleep(8)  # several resyncs: no retry storm, no second Event, still nothing written
    assert snapshot(cluster) == before, "a foreign object was modified"
    ours = kubectl_json(cluster, "get", "deployments,services,secrets", "-n", COLLIDE_NS,
                        "-l", "app.kubernetes.io/managed-by=semipd-operator")["items"]  # fmt: skip
    assert ours == [], "with a conflict the operator writes none of the pool's children"
    events = kubectl_json(cluster, "get", "events", "-n", COLLIDE_NS, "--field-selector", f"involvedObject.name={POOL}")
    assert [e["reason"] for e in events["items"]].count("Conflict") == 1, [e["reason"] for e in events["items"]]
    assert collide_operator.metric("semipd_kube_api_requests_total", verb="list", kind="Deployment") > 0
    assert collide_operator.metric("semipd_kube_api_requests_total", verb="apply", kind="Deployment") == 0
    assert not collide_operator.tracebacks()


# --- derived RBAC -----------------------------------------------------------------------------------

# How each recorded client call is authorized: (verb label, kind label) -> (API group, resource, RBAC verb).
KINDS = {"Deployment": ("apps", "deployments"), "Service": ("", "services"), "Secret": ("", "secrets"),
         "PodDisruptionBudget": ("policy", "poddisruptionbudgets"), "Pod": ("", "pods"),
         "InferencePool": ("inference.networking.k8s.io", "inferencepools"), "ConfigMap": ("", "configmaps"),
         "HTTPRoute": ("gateway.networking.k8s.io", "httproutes"), "Event": ("", "events")}  # fmt: skip
VERBS = {"apply": "patch", "create": "create", "list": "list", "get": "get", "delete": "delete"}


def rbac_need(verb: str, kind: str) -> tuple[str, str, str]:
    if kind == "InferencePool" and verb in ("get", "patch-status"):  # our own CR (PoolClient)
        return ("semipd.io", "inferencepools/status", "patch") if verb == "patch-status" else (
            "semipd.io", "inferencepools", "get")  # fmt: skip
    group, resource = KINDS[kind]
    return group, resource, VERBS[verb]


def chart_role_rules() -> set[tuple[str, str, str]]:
    rendered = subprocess.run(
        [str(binary("helm")), "template", RELEASE, str(CHART), "-n", OPS_NS, "--kube-version", "1.35.0",
         "--set", f"watchNamespaces={{{COLLIDE_NS}}}"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    (role,) = [d for d in yaml.safe_load_all(rendered)
               if d and d["kind"] == "Role" and d["metadata"]["namespace"] == COLLIDE_NS]  # fmt: skip
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}  # fmt: skip


def recorded_calls(op: OperatorProcess) -> set[tuple[str, str]]:
    """(verb, kind) of every API request the operator's client made, as its own request counter recorded them."""
    text = httpx.get(f"http://127.0.0.1:{op.metrics_port}/metrics", timeout=5).text
    calls = set()
    for line in text.splitlines():
        if line.startswith("semipd_kube_api_requests_total{") and float(line.rsplit(" ", 1)[1]) > 0:
            labels = dict(part.split("=", 1) for part in line[line.index("{") + 1 : line.index("}")].split(","))
            calls.add((labels["verb"].strip('"'), labels["kind"].strip('"')))
    return calls


def test_the_charts_role_grants_every_call_the_operator_made(cluster: Any, collide_operator: OperatorProcess) -> None:
    doc = base_pool()
    doc["metadata"]["name"] = "clean"
    cluster.kubectl("apply", "-n", COLLIDE_NS, "-f", "-", input=yaml.safe_dump(doc))
    names = ("clean-h200", "clean-ascend")
    wait_until(lambda: all(cluster.kubectl("get", "deployment", n, "-n", COLLIDE_NS, check=False).returncode == 0
                           for n in names), timeout=60, what="the clean pool's Deployments")  # fmt: skip
    doc["spec"]["nodePools"] = doc["spec"]["nodePools"][:1]  # prune: the ascend Deployment is deleted
    cluster.kubectl("apply", "-n", COLLIDE_NS, "-f", "-", input=yaml.safe_dump(doc))
    wait_until(lambda: cluster.kubectl("get", "deployment", "clean-ascend", "-n", COLLIDE_NS,
                                       check=False).returncode != 0, timeout=60, what="pruned")  # fmt: skip
    calls = recorded_calls(collide_operator)
    assert {("create", "Deployment"), ("list", "Deployment"), ("delete", "Deployment"), ("create", "Secret"),
            ("patch-status", "InferencePool"), ("create", "Event")} <= calls, calls  # fmt: skip
    granted = chart_role_rules()
    missing = sorted(f"{verb} {kind} needs {rbac_need(verb, kind)}" for verb, kind in calls
                     if rbac_need(verb, kind) not in granted)  # fmt: skip
    assert missing == []
    # Secrets: what the operator does with them is exactly what the chart grants, nothing more.
    assert {v for g, r, v in granted if r == "secrets"} == {"create", "delete"}
    assert {v for v, k in calls if k == "Secret"} <= {"create", "delete"}
