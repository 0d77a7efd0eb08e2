"""`helm install` of the chart into the real local control plane, the operator running as a pod.

The local kubelet runs the operator pod (annotation semipd.io/local-exec) as a process holding the
pod's own ServiceAccount token, so every API call it makes is authorized by the chart's RBAC and
nothing else. In order: the plain manifests pass a server-side dry run; the chart installs; the
operator takes a mixed GPU + Ascend pool to Ready, its rules and dashboard queries evaluate on the
real Prometheus, and the pool is deleted and garbage-collected, with no 403 in the operator's log;
forbidden actions are denied to its ServiceAccount (auth can-i and real requests with its token);
revoking the binding stops it and an upgrade restores it; the key survives upgrades; a cluster-wide
install works with the ClusterRole alone; uninstall keeps the CRD and the key.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from e2e.harness import wait_until
from e2e.harness.config import binary
from e2e.harness.kube import condition
from e2e.operator_process import GIE_CRD
from semipd.packaging import dashboard, dashboard_queries, grafana_to_promql, record_name, rule_groups

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "semipd-operator"
RELEASE = "semipd-e2e"
OPS_NS = "semipd-helm-e2e"  # the operator's namespace
RUN = uuid.uuid4().hex[:6]  # fresh pool namespaces per run: the last run's may still be terminating
POOL_NS = f"semipd-helm-pools-{RUN}"  # where its pools live (a Role there, in namespaced mode)
OTHER_NS = f"semipd-helm-other-{RUN}"  # holds an unrelated Secret the operator must not read
SA = f"system:serviceaccount:{OPS_NS}:{RELEASE}-semipd-operator"
POOL = "demo"
CRD = "inferencepools.semipd.io"
OWNED = "deployments,services,poddisruptionbudgets,inferencepools.inference.networking.k8s.io,secrets"


class Helm:
    """The real helm, against the test cluster, with its state dirs out of $HOME."""

    def __init__(self, cluster: Any, home: Path) -> None:
        self.path = binary("helm")
        self.cluster = cluster
        self.env = {
            **os.environ,
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }

    def __call__(self, *args: str, check: bool = True, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(self.path), "--kubeconfig", str(self.cluster.kubeconfig), *args],
            env=self.env, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        if check and proc.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
        return proc


def values(prometheus_url: str, watch: list[str] | None) -> dict[str, Any]:
    return {
        "watchNamespaces": watch or [],
        "podAnnotations": {"semipd.io/local-exec": "true"},
        "operator": {
            "prometheusURL": prometheus_url,
            "resyncInterval": "3s",
            "engineTerminationGrace": "20s",
            "enginePodAnnotations": {"semipd.io/local-exec": "true"},
        },
        "livenessProbe": {"initialDelaySeconds": 5, "periodSeconds": 5},
    }


def kubectl_json(cluster: Any, *args: str) -> Any:
    return json.loads(cluster.kubectl(*args, "-o", "json").stdout)


def operator_pods(cluster: Any) -> list[dict[str, Any]]:
    sel = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=operator"
    return [p for p in kubectl_json(cluster, "get", "pods", "-n", OPS_NS, "-l", sel)["items"]
            if not p["metadata"].get("deletionTimestamp")]  # fmt: skip


def lease_holder_pod(cluster: Any) -> str | None:
    """The pod named by the leader Lease's holderIdentity (`<pod>_<pid>`), while it holds it."""
    out = cluster.kubectl("get", "lease", "semipd-operator", "-n", OPS_NS, "-o", "json", check=False)
    if out.returncode != 0:
        return None
    holder = json.loads(out.stdout)["spec"].get("holderIdentity") or ""
    return holder.rsplit("_", 1)[0] or None


def operator_pod(cluster: Any) -> dict[str, Any]:
    """The leading operator pod (the chart runs two replicas; one holds the Lease)."""

    def leader() -> dict[str, Any] | None:
        name = lease_holder_pod(cluster)
        return next((dict(p) for p in operator_pods(cluster) if p["metadata"]["name"] == name), None)

    return wait_until(leader, timeout=120, what="the leading operator pod",
                      on_timeout=lambda: repr([p["metadata"]["name"] for p in operator_pods(cluster)]))  # fmt: skip


def operator_log(cluster: Any) -> str:
    return str(cluster.pod_log(OPS_NS, operator_pod(cluster)["metadata"]["name"], "operator"))


def pool_manifest(name: str = POOL) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "sim-mixed-gpu-ascend.yaml").read_text())
    doc["metadata"]["name"] = name
    doc["spec"]["engine"]["args"] = ["--speedup", "50"]
    doc["spec"]["nodePools"][1]["minReplicas"] = 1  # run the Ascend node pool too
    return doc


def wait_pool_ready(cluster: Any, ns: str, name: str, timeout: float = 180) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        obj: dict[str, Any] = kubectl_json(cluster, "get", CRD, name, "-n", ns)
        ready = {p["name"]: p["readyReplicas"] for p in (obj.get("status") or {}).get("nodePools", [])}
        ok = condition(obj, "Ready").get("status") == "True" and ready == {"h200": 1, "ascend": 1}
        return obj if ok else None

    return wait_until(probe, timeout=timeout, what=f"{ns}/{name} Ready with one replica per node pool",
                      on_timeout=lambda: json.dumps(kubectl_json(cluster, "get", CRD, name, "-n", ns).get("status"))
                      + "\n" + operator_log(cluster)[-3000:])  # fmt: skip


def owned(cluster: Any, ns: str, name: str) -> list[str]:
    items = kubectl_json(cluster, "get", OWNED, "-n", ns, "-l", f"semipd.io/pool={name}")["items"]
    return sorted(f"{i['kind']}/{i['metadata']['name']}" for i in items)


def forbidden_lines(log: str) -> list[str]:
    """RBAC denials of the operator's ServiceAccount (not other 403s, e.g. a namespace being terminated)."""
    return [
        line for line in log.splitlines() if (SA in line and " cannot " in line) or "Not enough permissions" in line
    ]


def token_secret(cluster: Any) -> bytes:
    secret = kubectl_json(cluster, "get", "secret", f"{RELEASE}-semipd-operator-token-key", "-n", OPS_NS)
    return base64.b64decode(secret["data"]["key"])


def can_i(cluster: Any, verb: str, resource: str, ns: str | None) -> bool:
    scope = ["-n", ns] if ns else []
    proc = cluster.kubectl("auth", "can-i", verb, resource, f"--as={SA}", *scope, check=False)
    assert proc.stdout.strip() in ("yes", "no"), proc.stdout + proc.stderr
    return proc.stdout.strip() == "yes"


@pytest.fixture(scope="module")
def helm(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Helm]:
    h = Helm(cluster, tmp_path_factory.mktemp("helm"))
    assert h.path.exists(), "helm missing: run e2e/build-binaries.sh helm"
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(GIE_CRD))
    # A CRD left by `kubectl apply` (other e2e tests) is adopted the documented way (docs/operations.md).
    if cluster.kubectl("get", "crd", CRD, check=False).returncode == 0:
        cluster.kubectl("annotate", "crd", CRD, "--overwrite", f"meta.helm.sh/release-name={RELEASE}",
                        f"meta.helm.sh/release-namespace={OPS_NS}")  # fmt: skip
        cluster.kubectl("label", "crd", CRD, "--overwrite", "app.kubernetes.io/managed-by=Helm")
    for ns in (POOL_NS, OTHER_NS):
        cluster.ensure_namespace(ns)
    try:
        yield h
    finally:
        h("uninstall", RELEASE, "-n", OPS_NS, "--wait", "--timeout", "120s", check=False)
        for ns in (POOL_NS, OTHER_NS):
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.fixture(scope="module")
def installed(cluster: Any, helm: Helm, tmp_path_factory: pytest.TempPathFactory) -> Path:
    vals = tmp_path_factory.mktemp("values") / "values.yaml"
    vals.write_text(yaml.safe_dump(values(cluster.prometheus_url, [POOL_NS])))
    # What a user gets from a chart repository: the packaged chart, installed on its own.
    dist = tmp_path_factory.mktemp("dist")
    helm("package", str(CHART), "--destination", str(dist))
    (packaged,) = dist.glob("semipd-operator-*.tgz")
    helm("install", RELEASE, str(packaged), "-n", OPS_NS, "--create-namespace", "--values", str(vals),
         "--wait", "--timeout", "180s")  # fmt: skip
    return vals


def test_plain_manifests_pass_a_server_side_dry_run(cluster: Any) -> None:
    cluster.ensure_namespace("semipd-system")
    built = cluster.kubectl("kustomize", str(ROOT / "manifests")).stdout
    kinds = sorted(d["kind"] for d in yaml.safe_load_all(built) if d)
    assert {"Deployment", "ClusterRole", "CustomResourceDefinition"} <= set(kinds), kinds
    proc = cluster.kubectl("apply", "--dry-run=server", "-k", str(ROOT / "manifests"), check=False)
    assert proc.returncode == 0, proc.stderr
    assert "deployment.apps/semipd-operator created (server dry run)" in proc.stdout, proc.stdout


def test_operator_pod_runs_with_its_service_account(cluster: Any, installed: Path) -> None:
    assert len(operator_pods(cluster)) == 2, "the chart's default: a leader and a standby"
    pod = operator_pod(cluster)
    assert pod["spec"]["serviceAccountName"] == f"{RELEASE}-semipd-operator"
    assert pod["status"]["phase"] == "Running"
    ip = pod["status"]["podIP"]
    assert ip.startswith("127.")
    assert ip != "127.0.0.1"
    # Metrics and liveness bind the pod IP (SEMIPD_METRICS_HOST / SEMIPD_LIVENESS_ENDPOINT from status.podIP);
    # they come up once Kopf ran the startup handler (helm --wait only sees the pod Running).
    metrics = wait_until(
        lambda: httpx.get(f"http://{ip}:8080/metrics", timeout=5),
        timeout=60,
        what="operator metrics on the pod IP",
        on_timeout=lambda: operator_log(cluster)[-3000:],
    )
    assert metrics.status_code == 200
    assert "semipd_reconcile_duration_seconds" in metrics.text
    live = wait_until(lambda: httpx.get(f"http://{ip}:8081/healthz", timeout=5), timeout=30, what="liveness")
    assert live.status_code == 200, live.text
    assert "lastReconcileAgeSeconds" in live.text
    assert "Traceback" not in operator_log(cluster)


def test_packaged_chart_installs_with_its_crd_and_passes_helm_test(cluster: Any, helm: Helm, installed: Path) -> None:
    crd = kubectl_json(cluster, "get", "crd", CRD)
    assert crd["metadata"]["annotations"]["meta.helm.sh/release-name"] == RELEASE
    notes = helm("get", "notes", RELEASE, "-n", OPS_NS).stdout
    assert f"helm test {RELEASE} -n {OPS_NS}" in notes
    # The operator may restart while a loaded machine imports it: test once it is Ready, as a user would.
    wait_until(lambda: condition(operator_pod(cluster), "Ready").get("status") == "True", timeout=180,
               what="the operator pod Ready")  # fmt: skip
    # The hook pod runs `semipd chart-test` (the CRD is served, the operator answers on its pod IP).
    # No --logs: the pod is deleted once it succeeds (hook-delete-policy), and kwok serves no logs.
    proc = helm("test", RELEASE, "-n", OPS_NS, "--timeout", "180s", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    phases = [line.split(":", 1)[1].strip() for line in proc.stdout.splitlines() if line.startswith("Phase:")]
    assert phases, proc.stdout
    assert set(phases) == {"Succeeded"}, proc.stdout


def test_full_pool_lifecycle_with_only_the_charts_rbac(cluster: Any, installed: Path) -> None:
    cluster.kubectl("apply", "-n", POOL_NS, "-f", "-", input=yaml.safe_dump(pool_manifest()))
    obj = wait_pool_ready(cluster, POOL_NS, POOL)
    assert condition(obj, "InvalidSpec")["status"] == "False"
    children = owned(cluster, POOL_NS, POOL)
    for want in (
        "Deployment/demo-h200",
        "Deployment/demo-ascend",
        "Service/demo-engines",
        "Secret/demo-agent-token",
        "PodDisruptionBudget/demo-h200",
        "InferencePool/demo-nvidia",
        "InferencePool/demo-ascend",
    ):
        assert want in children, children  # fmt: skip

    # The split is read from the agent on the operator's timer, which may come a tick after the pod is
    # Ready (CI on 7b2c9da: Ready with no split yet). Without the token it never comes.
    def h200_splits() -> list[dict[str, Any]]:
        status = kubectl_json(cluster, "get", CRD, POOL, "-n", POOL_NS).get("status") or {}
        return next((p.get("splits") for p in status.get("nodePools", []) if p["name"] == "h200"), None) or []

    splits = wait_until(h200_splits, timeout=60, what="the operator read the split from the agent with its token")
    assert splits[0]["prefillPercent"] == 50, splits
    events = kubectl_json(cluster, "get", "events", "-n", POOL_NS, "--field-selector", f"involvedObject.name={POOL}")
    assert any(e["reason"] == "Applied" for e in events["items"]), "Events are created with the chart's RBAC"
    assert forbidden_lines(operator_log(cluster)) == []

    cluster.kubectl("delete", CRD, POOL, "-n", POOL_NS, "--wait=true", "--timeout=60s")
    wait_until(lambda: owned(cluster, POOL_NS, POOL) == [], timeout=90, what="children garbage-collected")
    pods = lambda: kubectl_json(cluster, "get", "pods", "-n", POOL_NS, "-l", f"semipd.io/pool={POOL}")["items"]  # noqa: E731
    wait_until(lambda: pods() == [], timeout=90, what="engine pods gone")
    log = operator_log(cluster)
    assert forbidden_lines(log) == [], forbidden_lines(log)
    assert "Traceback" not in log, log[-4000:]


def test_rules_and_dashboard_queries_evaluate_on_real_prometheus(cluster: Any, installed: Path) -> None:
    name = "prom"
    cluster.kubectl("apply", "-n", POOL_NS, "-f", "-", input=yaml.safe_dump(pool_manifest(name)))
    wait_pool_ready(cluster, POOL_NS, name)
    pods = kubectl_json(cluster, "get", "pods", "-n", POOL_NS, "-l", f"semipd.io/pool={name}")["items"]
    # The requests must land after Prometheus's first scrape of each pod: a series first seen with
    # the requests already counted shows no increase, and the p99 stays NaN for good.
    count = f'sglang:time_to_first_token_seconds_count{{namespace="{POOL_NS}",semipd_io_pool="{name}"}}'
    wait_until(lambda: len(cluster.prometheus_query(count)) == len(pods), timeout=60, interval=1,
               what="Prometheus scraped every engine pod once")  # fmt: skip
    for pod in pods:
        for _ in range(3):
            rsp = httpx.post(
                f"http://{pod['status']['podIP']}:8000/v1/completions",
                json={"model": "llama-3-8b", "prompt": "hello " * 16, "max_tokens": 4, "ignore_eos": True},
                timeout=30,
            )
            assert rsp.status_code == 200, rsp.text
    record = next(
        r for g in rule_groups()["groups"] for r in g["rules"]
        if r.get("record") == record_name("node_pool", "ttft", "5m") and r["labels"]["engine_metrics"] == "sglang"
    )  # fmt: skip

    def recorded() -> list[dict[str, Any]] | None:
        result = [
            s for s in cluster.prometheus_query(record["expr"])
            if s["metric"].get("pool") == name and s["metric"].get("namespace") == POOL_NS  # not an earlier run's
        ]  # fmt: skip
        # NaN until a scrape after the requests shows the buckets' increase.
        return result if len(result) == 2 and all(float(s["value"][1]) > 0 for s in result) else None

    series = wait_until(recorded, timeout=90, what="p99 TTFT per node pool from Prometheus")
    assert sorted(s["metric"]["node_pool"] for s in series) == ["ascend", "h200"]
    # Every rule and dashboard expression is valid PromQL for this Prometheus (errors raise).
    exprs = [r["expr"] for g in rule_groups()["groups"] for r in g["rules"]]
    exprs += [grafana_to_promql(q, namespace=POOL_NS, pool=name) for q in dashboard_queries(dashboard())]
    for expr in exprs:
        cluster.prometheus_query(expr)
    board = dashboard()
    pool_var = next(v["query"]["query"] for v in board["templating"]["list"] if v["name"] == "pool")
    listed = cluster.prometheus_query(grafana_to_promql(pool_var, namespace=POOL_NS))
    assert {"semipd_io_pool": name} in [s["metric"] for s in listed], listed
    split = next(q for q in dashboard_queries(board) if "prefill_share_ratio" in q)
    shares = cluster.prometheus_query(grafana_to_promql(split, namespace=POOL_NS, pool=name))
    assert sorted(float(s["value"][1]) for s in shares) == [0.5, 0.5], shares  # a ratio, not a percent
    cluster.kubectl("delete", CRD, name, "-n", POOL_NS, "--wait=true", "--timeout=60s")


def test_forbidden_actions_are_denied_to_the_operator(cluster: Any, installed: Path) -> None:
    cluster.kubectl("create", "secret", "generic", "unrelated", "-n", OTHER_NS, "--from-literal=password=hunter2",
                    check=False)  # fmt: skip
    for verb, resource, ns in [
        ("get", "secrets", OTHER_NS), ("list", "secrets", OTHER_NS), ("list", "secrets", POOL_NS),
        ("get", "secrets", POOL_NS), ("watch", "secrets", POOL_NS),
        ("patch", "secrets", POOL_NS), ("update", "secrets", POOL_NS), ("patch", "secrets", OTHER_NS),
        ("create", "deployments.apps", OTHER_NS), ("list", "inferencepools.semipd.io", OTHER_NS),
        ("delete", "pods", POOL_NS), ("create", "pods", POOL_NS), ("update", "deployments.apps", POOL_NS),
        ("create", "clusterroles.rbac.authorization.k8s.io", None), ("patch", "nodes", None),
        ("create", "customresourcedefinitions.apiextensions.k8s.io", None), ("list", "configmaps", POOL_NS),
    ]:  # fmt: skip
        assert not can_i(cluster, verb, resource, ns), f"{SA} may {verb} {resource} in {ns}"
    for verb, resource, ns in [
        ("create", "secrets", POOL_NS), ("list", "inferencepools.semipd.io", POOL_NS),
        ("patch", "inferencepools.semipd.io/status", POOL_NS), ("list", "nodes", None), ("create", "events", POOL_NS),
    ]:  # fmt: skip
        assert can_i(cluster, verb, resource, ns), f"{SA} may not {verb} {resource} in {ns}"

    # The same with real requests, using the token the kubelet minted for the operator pod.
    pod = operator_pod(cluster)
    pod_dir = cluster.pod_dir(OPS_NS, pod["metadata"]["name"])
    (token_file,) = pod_dir.glob("volumes/kube-api-access-*/token")
    token = token_file.read_text().strip()
    tls = ssl.create_default_context(cafile=str(cluster.ca_file))
    with httpx.Client(base_url=cluster.api_url, verify=tls, timeout=10,
                      headers={"Authorization": f"Bearer {token}"}) as api:  # fmt: skip
        review = api.post("/apis/authentication.k8s.io/v1/selfsubjectreviews",
                          json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})  # fmt: skip
        assert review.json()["status"]["userInfo"]["username"] == SA
        assert api.get(f"/api/v1/namespaces/{OTHER_NS}/secrets/unrelated").status_code == 403
        assert api.get(f"/api/v1/namespaces/{OTHER_NS}/secrets").status_code == 403
        assert api.get(f"/api/v1/namespaces/{POOL_NS}/secrets").status_code == 403
        assert api.get("/api/v1/secrets").status_code == 403
        assert api.get(f"/apis/semipd.io/v1alpha1/namespaces/{OTHER_NS}/inferencepools").status_code == 403
        assert api.get(f"/apis/semipd.io/v1alpha1/namespaces/{POOL_NS}/inferencepools").status_code == 200
        assert api.get(f"/api/v1/namespaces/{POOL_NS}/pods").status_code == 200


def test_revoking_the_binding_stops_the_operator_and_an_upgrade_restores_it(
    cluster: Any, helm: Helm, installed: Path
) -> None:
    """The operator acts with the chart's Role and nothing else: without the binding it is forbidden."""
    key = token_secret(cluster)
    cluster.kubectl("delete", "rolebinding", f"{RELEASE}-semipd-operator", "-n", POOL_NS)
    wait_until(lambda: not can_i(cluster, "create", "secrets", POOL_NS), timeout=30, what="binding revoked")
    name = "revoked"
    cluster.kubectl("apply", "-n", POOL_NS, "-f", "-", input=yaml.safe_dump(pool_manifest(name)))
    wait_until(lambda: forbidden_lines(operator_log(cluster)), timeout=60, what="403 in the operator log")
    assert owned(cluster, POOL_NS, name) == []
    assert not (kubectl_json(cluster, "get", CRD, name, "-n", POOL_NS).get("status") or {}).get("conditions")

    helm("upgrade", RELEASE, str(CHART), "-n", OPS_NS, "--values", str(installed), "--wait", "--timeout", "180s")
    wait_pool_ready(cluster, POOL_NS, name)
    assert token_secret(cluster) == key, "helm upgrade kept the token key (lookup)"
    cluster.kubectl("delete", CRD, name, "-n", POOL_NS, "--wait=true", "--timeout=60s")
    wait_until(lambda: owned(cluster, POOL_NS, name) == [], timeout=90, what="children garbage-collected")


def test_cluster_wide_install_uses_the_cluster_role(cluster: Any, helm: Helm, installed: Path, tmp_path: Path) -> None:
    key = token_secret(cluster)
    vals = tmp_path / "cluster-wide.yaml"
    vals.write_text(yaml.safe_dump(values(cluster.prometheus_url, None)))
    helm("upgrade", RELEASE, str(CHART), "-n", OPS_NS, "--values", str(vals), "--wait", "--timeout", "180s")
    assert kubectl_json(cluster, "get", "roles", "-n", POOL_NS, "-l", f"app.kubernetes.io/instance={RELEASE}")[
        "items"] == []  # fmt: skip
    assert not can_i(cluster, "list", "namespaces", None), "cluster-wide Kopf needs no namespace watch"
    wait_until(lambda: operator_pod(cluster)["status"].get("phase") == "Running", timeout=60, what="new operator pod")
    ns = OTHER_NS
    name = "wide"
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(pool_manifest(name)))
    wait_pool_ready(cluster, ns, name)
    assert token_secret(cluster) == key
    cluster.kubectl("delete", CRD, name, "-n", ns, "--wait=true", "--timeout=60s")
    wait_until(lambda: owned(cluster, ns, name) == [], timeout=90, what="children garbage-collected")
    log = operator_log(cluster)
    assert forbidden_lines(log) == [], forbidden_lines(log)


def test_uninstall_keeps_the_crd_and_the_token_key(cluster: Any, helm: Helm, installed: Path) -> None:
    key = token_secret(cluster)
    helm("uninstall", RELEASE, "-n", OPS_NS, "--wait", "--timeout", "120s")
    sel = f"app.kubernetes.io/instance={RELEASE}"
    wait_until(lambda: kubectl_json(cluster, "get", "pods", "-n", OPS_NS, "-l", sel)["items"] == [], timeout=60,
               what="operator pod gone")  # fmt: skip
    assert cluster.kubectl("get", "crd", CRD, check=False).returncode == 0, "helm.sh/resource-policy: keep"
    assert token_secret(cluster) == key
    assert cluster.kubectl("get", "clusterrole", f"{RELEASE}-semipd-operator", check=False).returncode != 0
