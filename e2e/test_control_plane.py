"""Proof that the local control plane is a real one (issue 3).

Real etcd/apiserver/controller-manager/scheduler/kwok, accelerator node pools with 127/8 pod
CIDRs, pods run as local processes on their pod IPs, Prometheus discovering them through the
apiserver, and the controller-manager garbage-collecting owned objects.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from e2e.harness import LOCAL_EXEC_ANNOTATION, Cluster, gpu_pool, wait_until
from e2e.harness.config import REPO_ROOT, RUN_MARKER_ENV
from e2e.harness.processes import pids_with_marker
from semipd.data import upstream_gie_crd

pytestmark = pytest.mark.e2e

SEMIPD_CRD = REPO_ROOT / "crds" / "semipd.io_inferencepools.yaml"
GIE_CRD = Path(str(upstream_gie_crd()))  # shipped as package data
LOOPBACK = ipaddress.ip_network("127.0.0.0/8")


def deployment(
    name: str,
    namespace: str,
    *,
    command: list[str],
    replicas: int = 1,
    limits: dict[str, str] | None = None,
    tolerations: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
    local: bool = True,
    extra_pod_spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    pod_annotations = {LOCAL_EXEC_ANNOTATION: "true"} if local else {}
    pod_annotations.update(annotations or {})
    container: dict[str, Any] = {"name": "main", "image": "local", "command": command}
    if limits:
        container["resources"] = {"limits": limits}
    spec: dict[str, Any] = {"containers": [container], "terminationGracePeriodSeconds": 5}
    if tolerations:
        spec["tolerations"] = tolerations
    spec.update(extra_pod_spec or {})
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}, "annotations": pod_annotations}, "spec": spec},
        },
    }


def kubectl_json(cluster: Cluster, *args: str) -> Any:
    return json.loads(cluster.kubectl(*args, "-o", "json").stdout)


def install_crd(cluster: Cluster, path: Path) -> str:
    """kubectl apply a CRD and wait until it is Established; returns its name."""
    out = cluster.kubectl("apply", "--server-side", "-f", str(path), check=False)
    assert out.returncode == 0, f"the apiserver refused {path.name}:\n{out.stderr}"
    name = out.stdout.split()[0].split("/", 1)[1]
    cluster.wait_crd_established(name)
    return name


def kubectl_create(cluster: Cluster, manifest: dict[str, Any], *extra: str) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl("create", "-f", "-", *extra, input=json.dumps(manifest), check=False)


# --- nodes ----------------------------------------------------------------------------------


def test_nodes_are_ready_accelerator_pools_with_loopback_pod_cidrs(cluster: Cluster) -> None:
    items = kubectl_json(cluster, "get", "nodes")["items"]
    by_pool: dict[str, list[dict[str, Any]]] = {}
    for n in items:
        by_pool.setdefault(n["metadata"]["labels"].get("semipd.io/node-pool", ""), []).append(n)
    assert len(by_pool["gpu-h200"]) == 4
    assert len(by_pool["ascend-910b"]) == 2
    cidrs = []
    for n in items:
        conds = {c["type"]: c["status"] for c in n["status"]["conditions"]}
        assert conds["Ready"] == "True", n["metadata"]["name"]
        cidr = ipaddress.ip_network(n["spec"]["podCIDR"])
        assert cidr.subnet_of(LOOPBACK)
        assert ipaddress.ip_address("127.0.0.1") not in cidr
        cidrs.append(cidr)
    assert all(not a.overlaps(b) for i, a in enumerate(cidrs) for b in cidrs[i + 1 :])
    for n in by_pool["gpu-h200"]:
        assert n["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        assert n["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H200"
        assert "huawei.com/Ascend910" not in n["status"]["allocatable"]
    for n in by_pool["ascend-910b"]:
        assert n["status"]["allocatable"]["huawei.com/Ascend910"] == "8"
        assert n["metadata"]["labels"]["accelerator"] == "huawei-Ascend910"
        assert {"key": "huawei.com/Ascend910", "value": "present", "effect": "NoSchedule"} in n["spec"]["taints"]


# --- CRDs -----------------------------------------------------------------------------------


EXAMPLE_POOL = REPO_ROOT / "examples" / "dense-gpu.yaml"


def _pool(name: str, namespace: str, **node_pool_changes: Any) -> dict[str, Any]:
    """The maintained example InferencePool, renamed, with its first node pool changed."""
    pool: dict[str, Any] = yaml.safe_load(EXAMPLE_POOL.read_text())
    pool["metadata"] = {"name": name, "namespace": namespace}
    pool["spec"]["nodePools"][0].update(node_pool_changes)
    return pool


def test_semipd_crd_installs_and_apiserver_enforces_schema_and_cel(cluster: Cluster, namespace: str) -> None:
    assert SEMIPD_CRD.exists(), f"{SEMIPD_CRD} missing (generated CRD)"
    install_crd(cluster, SEMIPD_CRD)

    good = kubectl_create(cluster, _pool("good", namespace))
    assert good.returncode == 0, good.stderr
    stored = kubectl_json(cluster, "-n", namespace, "get", "inferencepools.semipd.io", "good")
    assert stored["spec"]["nodePools"][0]["accelerator"] == "nvidia"

    by_schema = kubectl_create(cluster, _pool("bad-schema", namespace, accelerator="tpu"))
    assert by_schema.returncode != 0
    assert "spec.nodePools[0].accelerator" in by_schema.stderr
    assert 'Unsupported value: "tpu"' in by_schema.stderr

    by_cel = kubectl_create(cluster, _pool("bad-cel", namespace, minReplicas=5, maxReplicas=2))
    assert by_cel.returncode != 0
    assert "minReplicas must not exceed maxReplicas" in by_cel.stderr

    names = kubectl_json(cluster, "-n", namespace, "get", "inferencepools.semipd.io")["items"]
    assert [p["metadata"]["name"] for p in names] == ["good"]


def test_upstream_gie_crd_installs_next_to_ours(cluster: Cluster, namespace: str) -> None:
    install_crd(cluster, GIE_CRD)
    gie = {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": {"name": "gie-pool", "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": "engine"}},
            "targetPorts": [{"number": 8000}],
            "endpointPickerRef": {"name": "epp", "port": {"number": 9002}},
        },
    }
    created = kubectl_create(cluster, gie)
    assert created.returncode == 0, created.stderr
    bad = json.loads(json.dumps(gie))
    bad["metadata"]["name"] = "gie-bad"
    bad["spec"]["targetPorts"] = [{"number": 0}]
    rejected = kubectl_create(cluster, bad)
    assert rejected.returncode != 0
    assert "targetPorts" in rejected.stderr
    got = kubectl_json(cluster, "-n", namespace, "get", "inferencepools.inference.networking.k8s.io")
    assert [p["metadata"]["name"] for p in got["items"]] == ["gie-pool"]


# --- scheduling -----------------------------------------------------------------------------


ASCEND_TOLERATION = [{"key": "huawei.com/Ascend910", "operator": "Exists", "effect": "NoSchedule"}]


def test_accelerator_requests_schedule_onto_matching_pools(cluster: Cluster, namespace: str) -> None:
    sleep = ["sleep", "3600"]
    cluster.apply(
        deployment("gpu", namespace, command=sleep, replicas=4, limits={"nvidia.com/gpu": "4"}, local=False),
        deployment(
            "npu",
            namespace,
            command=sleep,
            replicas=3,
            limits={"huawei.com/Ascend910": "4"},
            tolerations=ASCEND_TOLERATION,
            local=False,
        ),
        # Requests Ascend NPUs but does not tolerate the taint: must stay Pending.
        deployment(
            "npu-untolerated", namespace, command=sleep, replicas=1, limits={"huawei.com/Ascend910": "1"}, local=False
        ),
    )
    gpu_pods = cluster.wait_pods(namespace, "app=gpu", 4)
    npu_pods = cluster.wait_pods(namespace, "app=npu", 3)
    assert {p.spec.node_name.rsplit("-", 1)[0] for p in gpu_pods} == {"gpu-h200"}
    assert {p.spec.node_name.rsplit("-", 1)[0] for p in npu_pods} == {"ascend-910b"}
    # 4 GPUs each on 8-GPU nodes: the scheduler must not put more than two on one node.
    per_node: dict[str, int] = {}
    for p in gpu_pods:
        per_node[p.spec.node_name] = per_node.get(p.spec.node_name, 0) + 1
    assert max(per_node.values()) <= 2

    def unschedulable() -> str | None:
        (pod,) = cluster.core().list_namespaced_pod(namespace, label_selector="app=npu-untolerated").items
        conds = {c.type: c for c in (pod.status.conditions or [])}
        sched = conds.get("PodScheduled")
        return sched.message if sched and sched.status == "False" and sched.reason == "Unschedulable" else None

    message = wait_until(unschedulable, timeout=30, what="untolerated NPU pod reported Unschedulable")
    assert "untolerated taint" in message


# --- local execution on pod IPs -----------------------------------------------------------


def test_local_process_serves_http_on_its_pod_ip(cluster: Cluster, namespace: str) -> None:
    # An init container writes a page into a shared emptyDir mounted at /semipd; the main
    # container serves that directory on $POD_IP:8080. Both see the same volume at the same
    # path, inside their own mount namespaces.
    dep = deployment(
        "web",
        namespace,
        replicas=2,
        command=[
            "sh",
            "-c",
            'echo "gpus=$NVIDIA_VISIBLE_DEVICES" >> /semipd/index.html && '
            "exec python3 -m http.server --bind $(POD_IP) --directory /semipd 8080",
        ],
        limits={"nvidia.com/gpu": "1"},
        extra_pod_spec={
            "initContainers": [
                {
                    "name": "write-page",
                    "image": "local",
                    "command": ["sh", "-c", 'echo "pod=$POD_NAME ip=$POD_IP" > /semipd/index.html'],
                    "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                    "volumeMounts": [{"name": "shared", "mountPath": "/semipd"}],
                }
            ],
            "volumes": [{"name": "shared", "emptyDir": {}}],
        },
    )
    dep["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = [{"name": "shared", "mountPath": "/semipd"}]
    dep["spec"]["template"]["spec"]["containers"][0]["readinessProbe"] = {
        "httpGet": {"path": "/", "port": 8080},
        "periodSeconds": 1,
    }
    dep["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    ]
    cluster.apply(dep)
    pods = cluster.wait_pods(namespace, "app=web", 2)
    nodes = {n.metadata.name: n for n in cluster.core().list_node().items}
    assert len({p.status.pod_ip for p in pods}) == 2
    devices: dict[str, set[str]] = {}
    for p in pods:
        ip = ipaddress.ip_address(p.status.pod_ip)
        assert ip in LOOPBACK
        assert str(ip) != "127.0.0.1"
        assert ip in ipaddress.ip_network(nodes[p.spec.node_name].spec.pod_cidr)
        r = httpx.get(f"http://{ip}:8080/index.html", timeout=5)
        assert r.status_code == 200
        page, gpus = r.text.strip().split("\n")
        assert page == f"pod={p.metadata.name} ip={ip}"
        # The local kubelet hands out device indices per node, as the NVIDIA device plugin does.
        assert gpus.removeprefix("gpus=") in {str(i) for i in range(8)}
        assert gpus not in devices.setdefault(p.spec.node_name, set())
        devices[p.spec.node_name].add(gpus)
        assert p.status.container_statuses[0].ready is True
        assert p.status.init_container_statuses[0].state.terminated.exit_code == 0
        # Nothing listens on the wildcard address: the process bound only its pod IP.
        with pytest.raises(httpx.ConnectError):
            httpx.get("http://127.0.0.1:8080/", timeout=2)


METRICS_SERVER = textwrap.dedent("""
    import os, time
    from prometheus_client import Gauge, start_http_server
    Gauge("semipd_e2e_answer", "a value only this pod exports").set(float(os.environ["ANSWER"]))
    start_http_server(9400, addr=os.environ["POD_IP"])
    while True:
        time.sleep(3600)
""")


def test_prometheus_discovers_and_scrapes_annotated_pods(cluster: Cluster, namespace: str) -> None:
    annotations = {"prometheus.io/scrape": "true", "prometheus.io/port": "9400", "prometheus.io/path": "/metrics"}
    scraped = deployment("metrics", namespace, command=["python3", "-c", METRICS_SERVER], annotations=annotations)
    scraped["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "ANSWER", "value": "42"}]
    # Same server, not annotated for scraping: Prometheus must ignore it.
    ignored = deployment("unscraped", namespace, command=["python3", "-c", METRICS_SERVER])
    ignored["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "ANSWER", "value": "7"}]
    for dep in (scraped, ignored):
        dep["spec"]["template"]["spec"]["containers"][0]["readinessProbe"] = {
            "tcpSocket": {"port": 9400},
            "periodSeconds": 1,
        }
    cluster.apply(scraped, ignored)
    (pod,) = cluster.wait_pods(namespace, "app=metrics", 1)
    (other,) = cluster.wait_pods(namespace, "app=unscraped", 1)
    assert httpx.get(f"http://{other.status.pod_ip}:9400/metrics", timeout=5).status_code == 200

    selector = f'namespace="{namespace}",pod="{pod.metadata.name}"'
    up = wait_until(
        lambda: cluster.prometheus_query(f"up{{{selector}}} == 1"),
        timeout=60,
        what="Prometheus to scrape the annotated pod",
    )
    assert up[0]["metric"]["instance"] == f"{pod.status.pod_ip}:9400"
    assert up[0]["metric"]["node"] == pod.spec.node_name
    value = cluster.prometheus_query(f"semipd_e2e_answer{{{selector}}}")
    assert [float(v["value"][1]) for v in value] == [42.0]
    assert cluster.prometheus_query(f'up{{namespace="{namespace}",pod="{other.metadata.name}"}}') == []
    assert cluster.prometheus_query(f'semipd_e2e_answer{{namespace="{namespace}"}} == 7') == []


def test_prometheus_can_be_stopped_and_restarted(cluster: Cluster) -> None:
    own = 'up{job="prometheus"} == 1'
    wait_until(lambda: cluster.prometheus_query(own), timeout=30, what="Prometheus scraping itself")
    t_before = time.time()
    cluster.stop_prometheus()
    try:
        with pytest.raises(httpx.ConnectError):
            cluster.prometheus_query("up")
        assert not cluster.process_alive("prometheus")
    finally:
        cluster.start_prometheus()
    assert cluster.process_alive("prometheus")
    # Same URL, and the TSDB survived the restart: the sample from before the stop is still there.
    assert cluster.prometheus_query(f'up{{job="prometheus"}} @ {t_before:.3f}')
    wait_until(lambda: cluster.prometheus_query(own), timeout=30, what="Prometheus scraping again")


# --- lifecycle ------------------------------------------------------------------------------


def test_deleting_the_owner_garbage_collects_replicasets_pods_and_processes(cluster: Cluster, namespace: str) -> None:
    dep = deployment(
        "gc", namespace, replicas=2, command=["python3", "-m", "http.server", "--bind", "$(POD_IP)", "8081"]
    )
    dep["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    ]
    cluster.apply(dep)
    pods = cluster.wait_pods(namespace, "app=gc", 2)
    ips = [p.status.pod_ip for p in pods]
    wait_until(
        lambda: all(httpx.get(f"http://{ip}:8081/", timeout=2).status_code == 200 for ip in ips),
        timeout=30,
        what="both gc pods serving",
    )
    apps = cluster.apps()
    (rs,) = apps.list_namespaced_replica_set(namespace, label_selector="app=gc").items
    assert rs.metadata.owner_references[0].kind == "Deployment"
    assert pods[0].metadata.owner_references[0].name == rs.metadata.name

    apps.delete_namespaced_deployment("gc", namespace)  # default propagation: background GC
    wait_until(
        lambda: not apps.list_namespaced_replica_set(namespace, label_selector="app=gc").items,
        timeout=60,
        what="ReplicaSet garbage-collected",
    )
    cluster.wait_gone(namespace, "app=gc")

    def all_stopped() -> bool:
        for ip in ips:
            try:
                httpx.get(f"http://{ip}:8081/", timeout=1)
                return False
            except httpx.ConnectError:
                pass
        return True

    wait_until(all_stopped, timeout=15, what="the pods' local processes to stop")


def test_restart_policy_exit_codes_and_events(cluster: Cluster, namespace: str) -> None:
    core = cluster.core()
    base = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": namespace, "annotations": {LOCAL_EXEC_ANNOTATION: "true"}},
    }
    crashing = json.loads(json.dumps(base))
    crashing["metadata"]["name"] = "crasher"
    crashing["spec"] = {
        "restartPolicy": "Always",
        "containers": [{"name": "c", "image": "local", "command": ["sh", "-c", "echo attempt; exit 1"]}],
    }
    once = json.loads(json.dumps(base))
    once["metadata"]["name"] = "once"
    once["spec"] = {
        "restartPolicy": "Never",
        "containers": [{"name": "c", "image": "local", "command": ["sh", "-c", "echo done; exit 3"]}],
    }
    cluster.apply(crashing, once)

    def restarted_twice() -> Any:
        pod = core.read_namespaced_pod("crasher", namespace)
        cs = pod.status.container_statuses
        return pod if cs and cs[0].restart_count >= 2 else None

    pod = wait_until(restarted_twice, timeout=30, what="crasher restarted twice")
    assert pod.status.phase == "Running"
    assert pod.status.container_statuses[0].last_state.terminated.exit_code == 1
    assert cluster.pod_log(namespace, "crasher", previous=True).strip() == "attempt"
    # The current log belongs to the newest attempt, which may not have printed yet.
    assert cluster.pod_log(namespace, "crasher").strip() in ("", "attempt")

    def failed() -> Any:
        p = core.read_namespaced_pod("once", namespace)
        return p if p.status.phase == "Failed" else None

    done = wait_until(failed, timeout=30, what="pod 'once' Failed")
    assert done.status.container_statuses[0].state.terminated.exit_code == 3
    time.sleep(2)
    assert core.read_namespaced_pod("once", namespace).status.container_statuses[0].restart_count == 0
    reasons = {e.reason for e in cluster.events(namespace, "crasher")}
    assert {"Started", "BackOff"} <= reasons
    exited = [e for e in cluster.events(namespace, "once") if e.reason == "Exited"]
    assert exited
    assert "code 3" in exited[0].message


WHOAMI = textwrap.dedent("""
    from kubernetes import client, config
    config.load_incluster_config()
    api = client.ApiClient()
    review = client.AuthenticationV1Api(api).create_self_subject_review(client.V1SelfSubjectReview())
    print("user", review.status.user_info.username)
    core = client.CoreV1Api(api)
    print("pods", len(core.list_namespaced_pod(open(
        "/var/run/secrets/kubernetes.io/serviceaccount/namespace").read()).items) > 0)
    try:
        core.list_namespaced_secret("default")
        print("secrets allowed")
    except client.ApiException as exc:
        print("secrets", exc.status)
    import base64, json
    token = open("/var/run/secrets/kubernetes.io/serviceaccount/token").read()
    payload = token.split(".")[1]
    print("claims", json.dumps(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))))
""")


def test_in_pod_code_authenticates_as_its_service_account(cluster: Cluster, namespace: str) -> None:
    rbac = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader", "namespace": namespace}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "pod-reader", "namespace": namespace},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "reader", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
    ]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "whoami", "namespace": namespace, "annotations": {LOCAL_EXEC_ANNOTATION: "true"}},
        "spec": {
            "serviceAccountName": "reader",
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "local", "command": ["python3", "-c", WHOAMI]}],
        },
    }
    cluster.apply(*rbac)
    cluster.apply(pod)
    core = cluster.core()
    wait_until(
        lambda: core.read_namespaced_pod("whoami", namespace).status.phase in ("Succeeded", "Failed"),
        timeout=60,
        what="whoami pod to finish",
    )
    log = cluster.pod_log(namespace, "whoami")
    assert core.read_namespaced_pod("whoami", namespace).status.phase == "Succeeded", log
    assert log.split("\n")[:3] == [f"user system:serviceaccount:{namespace}:reader", "pods True", "secrets 403"]
    # The token came from the TokenRequest API bound to this very pod object.
    claims = json.loads(log.split("\n")[3].removeprefix("claims "))
    uid = core.read_namespaced_pod("whoami", namespace).metadata.uid
    assert claims["kubernetes.io"]["pod"] == {"name": "whoami", "uid": uid}
    assert claims["kubernetes.io"]["serviceaccount"]["name"] == "reader"


def test_second_up_reuses_and_down_leaves_no_process(tmp_path: Path) -> None:
    """A separate one-node cluster: up, up again (reused, same pids), down (nothing left)."""
    small = Cluster(tmp_path / "cluster")
    assert small.up(pools=[gpu_pool("gpu-small", 1)]) is False
    try:
        pids = {c: small.pid(c) for c in ("etcd", "kube-apiserver", "kubelet", "prometheus")}
        run_id = small.run_id
        assert len(pids_with_marker(RUN_MARKER_ENV, run_id)) >= 7
        nodes = [n.metadata.name for n in small.core().list_node().items]
        assert nodes == ["gpu-small-0"]
        again = Cluster(tmp_path / "cluster")
        assert again.up(pools=[gpu_pool("gpu-small", 2)]) is True
        assert {c: again.pid(c) for c in pids} == pids
        assert sorted(n.metadata.name for n in again.core().list_node().items) == ["gpu-small-0", "gpu-small-1"]
        api_port = again.ports.apiserver
    finally:
        small.down()
    assert pids_with_marker(RUN_MARKER_ENV, run_id) == []
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"https://127.0.0.1:{api_port}/readyz", verify=False, timeout=2)
    assert not Cluster(tmp_path / "cluster").state


def _local_pod(name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": {LOCAL_EXEC_ANNOTATION: "true"}},
        "spec": spec,
    }


def test_sidecar_graceful_termination_startup_and_liveness_probes(cluster: Cluster, namespace: str) -> None:
    core = cluster.core()
    graceful = _local_pod(
        "graceful",
        namespace,
        {
            "terminationGracePeriodSeconds": 20,
            "initContainers": [
                {
                    "name": "sidecar",
                    "image": "local",
                    "restartPolicy": "Always",
                    "command": [
                        "sh",
                        "-c",
                        "trap 'echo sidecar-term; exit 0' TERM; echo up; while :; do sleep 0.1; done",
                    ],
                }
            ],
            "containers": [
                {
                    "name": "main",
                    "image": "local",
                    "command": ["sh", "-c", "trap 'echo main-term; exit 0' TERM; echo up; while :; do sleep 0.1; done"],
                }
            ],
        },
    )
    stubborn = _local_pod(
        "stubborn",
        namespace,
        {
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {"name": "main", "image": "local", "command": ["sh", "-c", "trap '' TERM; echo up; exec sleep 3600"]}
            ],
        },
    )
    # Starts listening after ~2 s; the startup probe holds readiness and liveness off until then.
    slow = _local_pod(
        "slow-start",
        namespace,
        {
            "containers": [
                {
                    "name": "main",
                    "image": "local",
                    "command": ["sh", "-c", "sleep 2; exec python3 -m http.server --bind $POD_IP 8080"],
                    "startupProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1, "failureThreshold": 30},
                    "livenessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1, "failureThreshold": 1},
                    "readinessProbe": {"httpGet": {"port": 8080, "path": "/"}, "periodSeconds": 1},
                }
            ]
        },
    )
    unhealthy = _local_pod(
        "unhealthy",
        namespace,
        {
            "containers": [
                {
                    "name": "main",
                    "image": "local",
                    "command": ["sleep", "3600"],
                    "livenessProbe": {"tcpSocket": {"port": 9999}, "periodSeconds": 1, "failureThreshold": 2},
                }
            ],
        },
    )
    cluster.apply(graceful, stubborn, slow, unhealthy)
    for name in ("graceful", "stubborn", "unhealthy"):
        wait_until(
            lambda n=name: core.read_namespaced_pod(n, namespace).status.phase == "Running",
            timeout=30,
            what=f"{name} Running",
        )
    # Delete only once the shells have installed their traps (they print "up" after that).
    for name, container in (("graceful", "main"), ("graceful", "sidecar"), ("stubborn", "main")):
        wait_until(
            lambda n=name, c=container: cluster.pod_log(namespace, n, c).startswith("up"),
            timeout=15,
            what=f"{name}/{container} to arm its SIGTERM trap",
        )
    pod = core.read_namespaced_pod("graceful", namespace)
    assert pod.status.init_container_statuses[0].state.running is not None  # the sidecar keeps running

    t0 = time.monotonic()
    core.delete_namespaced_pod("graceful", namespace)
    core.delete_namespaced_pod("stubborn", namespace)
    wait_until(
        lambda: not [p for p in core.list_namespaced_pod(namespace).items if p.metadata.name == "graceful"],
        timeout=15,
        what="graceful pod removed",
    )
    graceful_s = time.monotonic() - t0
    assert graceful_s < 10  # it exited on SIGTERM, long before its 20 s grace period
    assert cluster.pod_log(namespace, "graceful", "main").split() == ["up", "main-term"]
    assert cluster.pod_log(namespace, "graceful", "sidecar").split() == ["up", "sidecar-term"]
    wait_until(
        lambda: not [p for p in core.list_namespaced_pod(namespace).items if p.metadata.name == "stubborn"],
        timeout=15,
        what="stubborn pod removed",
    )
    assert time.monotonic() - t0 >= 2  # SIGTERM ignored: removed only after the 2 s grace period
    assert "Killing" in {e.reason for e in cluster.events(namespace, "stubborn")}

    def restarted() -> Any:
        cs = core.read_namespaced_pod("unhealthy", namespace).status.container_statuses
        return cs and cs[0].restart_count >= 1

    wait_until(restarted, timeout=30, what="liveness failure to restart the container")
    assert "Unhealthy" in {e.reason for e in cluster.events(namespace, "unhealthy")}

    started = wait_until(lambda: _ready_pod(core, namespace, "slow-start"), timeout=30, what="slow-start Ready")
    status = started.status.container_statuses[0]
    assert status.started is True
    assert status.restart_count == 0  # liveness (failureThreshold 1) did not fire during the slow start


def test_missing_secret_blocks_the_container_until_it_exists(cluster: Cluster, namespace: str) -> None:
    core = cluster.core()
    pod = _local_pod(
        "needs-secret",
        namespace,
        {
            "containers": [
                {
                    "name": "main",
                    "image": "local",
                    "command": ["sh", "-c", 'echo "token=$TOKEN"; exec sleep 3600'],
                    "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "later", "key": "token"}}}],
                }
            ]
        },
    )
    cluster.apply(pod)

    def waiting_reason() -> str | None:
        cs = core.read_namespaced_pod("needs-secret", namespace).status.container_statuses
        return cs[0].state.waiting.reason if cs and cs[0].state.waiting else None

    assert wait_until(waiting_reason, timeout=30, what="container waiting") == "CreateContainerConfigError"
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "later", "namespace": namespace},
            "stringData": {"token": "s3cret"},
        }
    )
    cluster.wait_pods(namespace, "", 1, timeout=60)
    wait_until(
        lambda: cluster.pod_log(namespace, "needs-secret").strip() == "token=s3cret",
        timeout=15,
        what="container started with the secret's value",
    )


def _ready_pod(core: Any, namespace: str, name: str) -> Any:
    pod = core.read_namespaced_pod(name, namespace)
    conds = {c.type: c.status for c in (pod.status.conditions or [])}
    return pod if conds.get("Ready") == "True" else None
