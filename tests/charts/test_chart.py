"""The Helm chart rendered by the real helm: lint, schema, least-privilege RBAC derived from what the
operator does, the restricted single-replica Deployment, the token key, CRDs and monitoring objects."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from semipd.api.semantics import parse_spec
from semipd.controller.config import load_config
from semipd.controller.handlers import CHILD_KINDS
from semipd.controller.plan import UNWATCHED
from semipd.desired import names
from semipd.desired.owner import Owner
from semipd.desired.pool import desired_children
from semipd.desired.workload import WorkloadSettings
from semipd.packaging import CHART, CRD_SOURCE, KUBE_VERSION, dashboard, rule_groups
from tests.charts.conftest import ROOT, Render, one, run_helm

ALL_ON = {
    "monitoring": {"podMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
    "watchNamespaces": ["team-a", "team-b"],
    "operator": {"enginePodAnnotations": {"semipd.io/local-exec": "true"}},
}
Rule = tuple[str, str]  # (apiGroup, resource)


def rules_of(role: dict[str, Any]) -> dict[Rule, set[str]]:
    out: dict[Rule, set[str]] = {}
    for r in role["rules"]:
        for g in r["apiGroups"]:
            for res in r["resources"]:
                out.setdefault((g, res), set()).update(r["verbs"])
    return out


def container(objs: list[dict[str, Any]]) -> dict[str, Any]:
    dep = one(objs, "Deployment")
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    out: dict[str, Any] = c
    return out


def env_of(c: dict[str, Any], pod_ip: str = "127.0.0.9", pod_name: str = "op-0") -> dict[str, str]:
    """The container env as the kubelet resolves it (fieldRefs podIP and name, then $(VAR) expansion)."""
    env: dict[str, str] = {}
    for e in c["env"]:
        if "valueFrom" in e:
            path = e["valueFrom"]["fieldRef"]["fieldPath"]
            assert path in ("status.podIP", "metadata.name"), path
            env[e["name"]] = pod_ip if path == "status.podIP" else pod_name
        else:
            value = e["value"]
            for k, v in env.items():
                value = value.replace(f"$({k})", v)
            env[e["name"]] = value
    return env


# --- lint and schema ------------------------------------------------------------------------------


@pytest.mark.parametrize("values", [None, ALL_ON], ids=["defaults", "everything-on"])
def test_helm_lint_strict(helm: str, values: dict[str, Any] | None, tmp_path: Path) -> None:
    args = ["lint", "--strict", "--kube-version", KUBE_VERSION, str(ROOT / CHART)]
    if values:
        (tmp_path / "v.yaml").write_text(yaml.safe_dump(values))
        args += ["--values", str(tmp_path / "v.yaml")]
    proc = run_helm(helm, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"bogus": 1}, "additional properties 'bogus' not allowed"),
        ({"operator": {"resyncInterval": 30}}, "/operator/resyncInterval"),
        ({"operator": {"resyncInterval": "30 seconds"}}, "/operator/resyncInterval"),
        ({"watchNamespaces": ["Team_A"]}, "/watchNamespaces/0"),
        ({"image": {"digest": "latest"}}, "/image/digest"),
        ({"operator": {"metricsPort": 0}}, "/operator/metricsPort"),
        ({"operator": {"prometheusURL": "prometheus:9090"}}, "/operator/prometheusURL"),
    ],
)
def test_schema_rejects_bad_values(helm: str, tmp_path: Path, values: dict[str, Any], complaint: str) -> None:
    (tmp_path / "v.yaml").write_text(yaml.safe_dump(values))
    proc = run_helm(
        helm, "template", "x", str(ROOT / CHART), "--kube-version", KUBE_VERSION, "--values", str(tmp_path / "v.yaml")
    )
    assert proc.returncode != 0
    assert complaint in proc.stderr, proc.stderr


def test_default_render_is_valid_kubernetes(render: Render) -> None:
    objs = render()
    kinds = sorted(o["kind"] for o in objs)
    assert kinds == sorted(
        ["ServiceAccount", "Secret", "ConfigMap", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
         "Service", "Deployment", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "Role",
         "RoleBinding"]
    )  # fmt: skip
    cluster_scoped = ("CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                      "ValidatingAdmissionPolicyBinding")  # fmt: skip
    for o in objs:
        kubernetes_validate.validate(o, KUBE_VERSION.rsplit(".", 1)[0], strict=True)
        if o["kind"] not in cluster_scoped:
            assert o["metadata"]["namespace"] == "ops", o["kind"]
    assert "0.0.0.0" not in json.dumps(objs)


def test_everything_on_renders_valid_builtin_objects(render: Render) -> None:
    objs = render(ALL_ON)
    for o in objs:
        if o["apiVersion"].startswith("monitoring.coreos.com/"):
            continue
        kubernetes_validate.validate(o, KUBE_VERSION.rsplit(".", 1)[0], strict=True)


# --- RBAC -------------------------------------------------------------------------------------------


def test_leader_election_is_on_by_default_with_a_lease_role_limited_to_its_name(render: Render) -> None:
    objs = render()
    deploy = one(objs, "Deployment")
    assert deploy["spec"]["replicas"] == 2
    assert deploy["spec"]["strategy"]["type"] == "RollingUpdate"
    env = {e["name"]: e.get("value") for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["SEMIPD_LEADER_ELECTION"] == "true"
    assert env["SEMIPD_LEASE_NAMESPACE"] == "ops"
    role = one(objs, "Role")
    assert role["metadata"]["namespace"] == "ops"
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [env["SEMIPD_LEASE_NAME"]],
         "verbs": ["get", "update"]},
    ]  # fmt: skip
    # Without it: one replica, Recreate (two unelected operators would fight), and no Lease rights.
    off = render({"leaderElection": {"enabled": False}})
    assert one(off, "Deployment")["spec"]["replicas"] == 1
    assert one(off, "Deployment")["spec"]["strategy"]["type"] == "Recreate"
    assert not [o for o in off if o["kind"] == "Role"]


def test_rbac_has_exact_verbs_and_no_wildcards(render: Render) -> None:
    role = one(render(), "ClusterRole")
    text = json.dumps(role["rules"])
    assert "*" not in text
    got = rules_of(role)
    # Secrets: create-only (a patch response would hand back any Secret's data).
    assert got[("", "secrets")] == {"create", "delete"}  # delete: our own, replaced after a key rotation
    assert got[("", "pods")] == {"list", "watch", "patch"}  # patch: the context-length-range label only
    assert got[("", "events")] == {"create"}
    assert got[("semipd.io", "inferencepools/status")] == {"patch"}
    assert ("", "namespaces") not in got, "cluster-wide Kopf does not scan namespaces"
    # Expert-placement ConfigMaps: written and read back by name, never listed or watched.
    assert got[("", "configmaps")] == {"get", "create", "patch"}
    for verbs in got.values():
        assert "update" not in verbs or verbs == {"update"}  # only inferencepools/finalizers
    binding = one(render(), "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "rel-semipd-operator", "namespace": "ops"}]


def required_rules() -> dict[Rule, set[str]]:
    """What the operator's code does, rule by rule (so a new child kind without RBAC fails here)."""
    need: dict[Rule, set[str]] = {
        ("semipd.io", "inferencepools"): {"get", "list", "watch", "patch"},  # Kopf watch + annotations; PoolClient.get
        ("semipd.io", "inferencepools/status"): {"patch"},  # PoolClient.patch_status
        ("semipd.io", "inferencepools/finalizers"): {"update"},  # blockOwnerDeletion on children
        ("", "nodes"): {"list", "watch"},  # track_node
        ("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"},  # Kopf scanning, track_gie_crd
        ("", "events"): {"create"},  # EventRecorder, Kopf's warnings
        # controller/experts.py: ChildClient.get of the version in force, ChildClient.apply of a new version
        ("", "configmaps"): {"get", "create", "patch"},
        ("", "pods"): {"patch"},  # kvplacement.label_pods: server-side apply of the context-length-range label
    }
    plural_of = {kind: (group, plural) for group, _, plural, kind in CHILD_KINDS}
    plural_of["v1/Secret"] = ("", "secrets")
    need[("", "secrets")] = {"delete"}  # reconcile._check_owner replaces our token Secret after a key rotation
    for kind in plural_of.values():
        if kind != ("", "secrets"):
            need.setdefault(kind, set()).update({"list", "watch"})  # track_child watch caches
    doc = yaml.safe_load((ROOT / "examples" / "sim-mixed-gpu-ascend.yaml").read_text())
    spec, problems = parse_spec(doc["spec"])
    assert spec is not None
    assert not problems
    children = desired_children(
        Owner("p", "ns", "uid"), spec, token="t" * 64, replicas={np.name: 1 for np in spec.node_pools},
        settings=WorkloadSettings(), gie_installed=True, httproute_installed=True,
    )  # fmt: skip
    assert {c["kind"] for c in children} >= {"InferencePool", "HTTPRoute"}
    for child in children:
        key = f"{child['apiVersion']}/{child['kind']}"
        rule = plural_of[key]
        need.setdefault(rule, set()).add("create")  # the first write is a create (never an apply onto a stranger)
        if key not in UNWATCHED:
            need[rule].update({"patch", "delete"})  # server-side apply of what is ours; pruned when no longer wanted
    return need


def test_rbac_is_exactly_what_the_operator_does(render: Render) -> None:
    assert rules_of(one(render(), "ClusterRole")) == required_rules()


def test_namespaced_mode_grants_namespaced_rules_per_namespace(render: Render) -> None:
    objs = render(ALL_ON)
    cluster = rules_of(one(objs, "ClusterRole"))
    assert cluster == {
        ("", "nodes"): {"list", "watch"},
        ("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"},
        ("", "namespaces"): {"list", "watch"},  # Kopf's namespace observer runs only in namespaced mode
    }
    need = required_rules()
    namespaced = {k: v for k, v in need.items() if k not in cluster}
    lease = "-leader-election"  # the Lease Role in the release namespace (test above)
    roles = [o for o in objs if o["kind"] == "Role" and not o["metadata"]["name"].endswith(lease)]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    for role in roles:
        assert rules_of(role) == namespaced
    bindings = [o for o in objs if o["kind"] == "RoleBinding" and not o["metadata"]["name"].endswith(lease)]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    for b in bindings:
        assert b["subjects"][0]["namespace"] == "ops"
    assert env_of(container(objs))["SEMIPD_NAMESPACES"] == "team-a,team-b"


# --- the operator Deployment ----------------------------------------------------------------------------


def test_deployment_without_leader_election_is_single_replica_recreate_and_restricted(render: Render) -> None:
    objs = render({"leaderElection": {"enabled": False}})
    dep = one(objs, "Deployment")
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["strategy"] == {"type": "Recreate"}
    pod = dep["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == one(objs, "ServiceAccount")["metadata"]["name"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    c = container(objs)
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["runAsNonRoot"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert c["command"] == ["semipd", "operator"]
    assert c["resources"]["requests"]
    assert c["resources"]["limits"]["memory"]
    assert "readinessProbe" not in c


def test_operator_env_is_accepted_by_its_config_and_binds_the_pod_ip(render: Render) -> None:
    c = container(render({"operator": {"enginePodAnnotations": {"semipd.io/local-exec": "true", "a/b": "c"}}}))
    env = env_of(c, pod_ip="127.0.0.9")
    names_in_order = [e["name"] for e in c["env"]]
    assert names_in_order.index("POD_IP") < names_in_order.index("SEMIPD_METRICS_HOST")
    cfg = load_config(env)
    assert cfg.metrics_host == "127.0.0.9"
    assert cfg.liveness_endpoint == "http://127.0.0.9:8081/healthz"
    assert cfg.namespaces == ()
    assert cfg.token_key_file == "/etc/semipd/token-key/key"
    assert cfg.operator_image == c["image"] == "semipd-operator:0.1.0"
    assert dict(cfg.pod_annotations) == {"semipd.io/local-exec": "true", "a/b": "c"}
    assert cfg.termination_grace_seconds == 60
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"metrics": cfg.metrics_port, "liveness": 8081}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "liveness"}
    mount = next(m for m in c["volumeMounts"] if m["name"] == "token-key")
    assert mount["readOnly"] is True
    assert cfg.token_key_file.startswith(mount["mountPath"] + "/")


def test_engine_pod_annotations_refuse_commas(helm: str, tmp_path: Path) -> None:
    (tmp_path / "v.yaml").write_text(yaml.safe_dump({"operator": {"enginePodAnnotations": {"a": "x,y"}}}))
    proc = run_helm(
        helm, "template", "x", str(ROOT / CHART), "--kube-version", KUBE_VERSION, "--values", str(tmp_path / "v.yaml")
    )
    assert proc.returncode != 0
    assert "cannot contain ','" in proc.stderr


def test_image_digest_wins_and_is_passed_to_engine_pods(render: Render) -> None:
    digest = "sha256:" + "a" * 64
    c = container(render({"image": {"repository": "reg.example/semipd", "tag": "1.2.3", "digest": digest}}))
    assert c["image"] == f"reg.example/semipd@{digest}"
    assert env_of(c)["SEMIPD_OPERATOR_IMAGE"] == c["image"]


# --- token key --------------------------------------------------------------------------------------------


def test_token_key_secret_is_random_kept_and_mounted(render: Render) -> None:
    first, second = render(), render()
    keys = [base64.b64decode(one(o, "Secret")["data"]["key"]) for o in (first, second)]
    assert all(len(k) == 64 and k.isalnum() for k in keys)
    assert keys[0] != keys[1], "helm template cannot look up, so each render draws a fresh key"
    secret = one(first, "Secret")
    assert secret["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    vol = one(first, "Deployment")["spec"]["template"]["spec"]["volumes"][0]
    assert vol["secret"]["secretName"] == secret["metadata"]["name"]
    assert "annotations" not in one(render({"tokenKey": {"keep": False}}), "Secret")["metadata"]


def test_existing_token_key_secret(render: Render, helm: str, tmp_path: Path) -> None:
    objs = render({"tokenKey": {"create": False, "existingSecret": "mine"}})
    assert not [o for o in objs if o["kind"] == "Secret"]
    vol = one(objs, "Deployment")["spec"]["template"]["spec"]["volumes"][0]
    assert vol["secret"]["secretName"] == "mine"
    (tmp_path / "v.yaml").write_text(yaml.safe_dump({"tokenKey": {"create": False}}))
    proc = run_helm(
        helm, "template", "x", str(ROOT / CHART), "--kube-version", KUBE_VERSION, "--values", str(tmp_path / "v.yaml")
    )
    assert proc.returncode != 0
    assert "tokenKey.existingSecret is required" in proc.stderr


# --- CRD ----------------------------------------------------------------------------------------------------


def test_crd_is_the_generated_one_and_kept(render: Render) -> None:
    crd = one(render(), "CustomResourceDefinition")
    source = yaml.safe_load((ROOT / CRD_SOURCE).read_text())
    assert crd["spec"] == source["spec"]
    assert crd["metadata"]["name"] == source["metadata"]["name"]
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert crd["metadata"]["labels"]["app.kubernetes.io/instance"] == "rel"
    assert "annotations" not in one(render({"crds": {"keep": False}}), "CustomResourceDefinition")["metadata"]
    assert not [o for o in render({"crds": {"install": False}}) if o["kind"] == "CustomResourceDefinition"]


# --- monitoring ---------------------------------------------------------------------------------------------


def engine_deployment() -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "examples" / "sim-mixed-gpu-ascend.yaml").read_text())
    spec, _ = parse_spec(doc["spec"])
    assert spec is not None
    children = desired_children(
        Owner("p", "ns", "uid"), spec, token="t" * 64, replicas={np.name: 1 for np in spec.node_pools},
        settings=WorkloadSettings(), gie_installed=False,
    )  # fmt: skip
    return next(c for c in children if c["kind"] == "Deployment")


def test_pod_monitors_select_the_operator_and_engine_pods(render: Render) -> None:
    objs = render({"monitoring": {"podMonitor": {"enabled": True, "labels": {"release": "kps"}}}})
    monitors = {o["metadata"]["name"]: o for o in objs if o["kind"] == "PodMonitor"}
    assert set(monitors) == {"rel-semipd-operator", "rel-semipd-operator-engines"}
    op = monitors["rel-semipd-operator"]
    assert op["metadata"]["labels"]["release"] == "kps"
    pod_labels = one(objs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert op["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert op["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    assert op["spec"]["podMetricsEndpoints"][0]["honorLabels"] is True
    engines = monitors["rel-semipd-operator-engines"]
    assert engines["spec"]["namespaceSelector"] == {"any": True}
    template = engine_deployment()["spec"]["template"]
    assert engines["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    assert set(engines["spec"]["podTargetLabels"]) == {names.POOL_LABEL, names.NODE_POOL_LABEL, names.ACCELERATOR_LABEL}
    (endpoint,) = engines["spec"]["podMetricsEndpoints"]
    (engine,) = template["spec"]["containers"]
    assert [p["name"] for p in engine["ports"]].count(endpoint["port"]) == 1
    relabeled = {r["targetLabel"] for r in endpoint["relabelings"]}
    assert {"__address__", "__metrics_path__", "__scheme__"} <= relabeled
    for ann in ("prometheus.io/port", "prometheus.io/path", "prometheus.io/scheme"):
        assert ann in template["metadata"]["annotations"]


def test_prometheus_rule_is_the_generated_one(render: Render) -> None:
    rule = one(render({"monitoring": {"prometheusRule": {"enabled": True}}}), "PrometheusRule")
    assert rule["spec"] == rule_groups()


def test_dashboard_configmap_for_the_grafana_sidecar(render: Render) -> None:
    cm = one(render(), "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["semipd-pools.json"]) == dashboard()
    moved = one(render({"monitoring": {"dashboard": {"namespace": "grafana"}}}), "ConfigMap")
    assert moved["metadata"]["namespace"] == "grafana"
    assert not [o for o in render({"monitoring": {"dashboard": {"enabled": False}}}) if o["kind"] == "ConfigMap"]
