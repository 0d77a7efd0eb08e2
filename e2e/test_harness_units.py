"""Unit tests of the harness's pure parts (no cluster needed): pod-spec interpretation, node
planning, kwok stages and the Prometheus config."""

from __future__ import annotations

import base64
import ipaddress
from pathlib import Path
from typing import Any

import pytest

from e2e.harness import addresses, kwok, nodes, podspec, podvolumes, prometheus
from e2e.harness.config import LOCAL_EXEC_ANNOTATION
from e2e.harness.pki import Pki
from e2e.harness.podspec import ContainerState, PodConfigError


def pod(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "labels": {"app": "x"}, "annotations": {"a": "b"}},
        "spec": {
            "nodeName": "n1",
            "serviceAccountName": "sa",
            "containers": [{"name": "c", "resources": {"limits": {"cpu": "1500m", "memory": "1Gi"}}}],
            **spec,
        },
        "status": {"podIP": "127.10.0.5", "podIPs": [{"ip": "127.10.0.5"}], "hostIP": "127.2.0.1"},
    }


SECRETS = {"s": {"k": b"secret-value", "other": b"o"}}
CONFIGMAPS = {"cm": {"greeting": b"hi", "n": b"3"}}


def lookups() -> dict[str, Any]:
    return {"secrets": SECRETS.get, "configmaps": CONFIGMAPS.get}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$(A)-$(B)", "1-$(B)"),
        ("$$(A)", "$(A)"),
        ("cost $5", "cost $5"),
        ("$(A", "$(A"),
        ("end$", "end$"),
        ("$$$(A)", "$1"),
    ],
)
def test_expand_follows_kubernetes_rules(text: str, expected: str) -> None:
    assert podspec.expand(text, {"A": "1"}) == expected


def test_resolve_env_sources_and_order() -> None:
    container = {
        "name": "c",
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
        "env": [
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "URL", "value": "http://$(IP):8000/$(MISSING)"},
            {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            {"name": "G", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "greeting"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
            {"name": "MEM_MI", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
            {"name": "OPT", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k", "optional": True}}},
            {"name": "BASE", "value": "$(POD_IP)"},
        ],
    }
    env = podspec.resolve_env(pod(), container, base={"POD_IP": "127.10.0.5", "PATH": "/bin"}, **lookups())
    assert env["IP"] == "127.10.0.5"
    assert env["URL"] == "http://127.10.0.5:8000/$(MISSING)"
    assert env["PW"] == "secret-value"
    assert env["G"] == "hi"
    assert env["CM_greeting"] == "hi"
    assert env["CM_n"] == "3"
    assert env["APP"] == "x"
    assert env["CPU"] == "2"  # 1500m rounded up, as the kubelet does
    assert env["MEM_MI"] == "1024"
    assert "OPT" not in env
    assert env["BASE"] == "127.10.0.5"


def test_resolve_env_missing_required_secret_is_an_error() -> None:
    container = {"name": "c", "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k"}}}]}
    with pytest.raises(PodConfigError, match=r"Secret 'nope' not found"):
        podspec.resolve_env(pod(), container, base={}, **lookups())


def test_command_line_expands_and_requires_command() -> None:
    assert podspec.command_line({"name": "c", "command": ["srv"], "args": ["--ip=$(IP)"]}, {"IP": "1"}) == [
        "srv",
        "--ip=1",
    ]
    with pytest.raises(PodConfigError, match="no command"):
        podspec.command_line({"name": "c", "args": ["x"]}, {})


def test_projected_service_account_volume() -> None:
    minted: list[tuple[str | None, int]] = []

    def mint(aud: str | None, exp: int) -> str:
        minted.append((aud, exp))
        return "tok"

    vol = {
        "name": "kube-api-access-x",
        "projected": {
            "defaultMode": 0o644,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "cm", "items": [{"key": "greeting", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
            ],
        },
    }
    content = podvolumes.volume_content(pod(), vol, mint_token=mint, **lookups())
    assert content.refresh
    assert {f.path: f.data for f in content.files or []} == {"token": b"tok", "ca.crt": b"hi", "namespace": b"ns"}
    assert minted == [(None, 3607)]


def test_secret_volume_items_modes_and_escape_protection() -> None:
    vol = {
        "name": "v",
        "secret": {"secretName": "s", "defaultMode": 0o400, "items": [{"key": "k", "path": "dir/key", "mode": 0o600}]},
    }
    content = podvolumes.volume_content(pod(), vol, mint_token=lambda a, e: "", **lookups())
    assert [(f.path, f.data, f.mode) for f in content.files or []] == [("dir/key", b"secret-value", 0o600)]
    bad = {"name": "v", "secret": {"secretName": "s", "items": [{"key": "k", "path": "../../etc/x"}]}}
    with pytest.raises(PodConfigError, match="escapes"):
        podvolumes.volume_content(pod(), bad, mint_token=lambda a, e: "", **lookups())
    missing = {"name": "v", "configMap": {"name": "absent"}}
    with pytest.raises(PodConfigError, match="not found"):
        podvolumes.volume_content(pod(), missing, mint_token=lambda a, e: "", **lookups())
    optional = {"name": "v", "configMap": {"name": "absent", "optional": True}}
    assert podvolumes.volume_content(pod(), optional, mint_token=lambda a, e: "", **lookups()).files == []


def test_empty_dir_memory_and_unsupported_volume() -> None:
    mint = lambda a, e: ""  # noqa: E731
    assert podvolumes.volume_content(
        pod(), {"name": "v", "emptyDir": {"medium": "Memory"}}, mint_token=mint, **lookups()
    ).memory
    with pytest.raises(PodConfigError, match="unsupported volume"):
        podvolumes.volume_content(
            pod(), {"name": "v", "persistentVolumeClaim": {"claimName": "x"}}, mint_token=mint, **lookups()
        )


def test_mounts_order_subpath_and_validation() -> None:
    c = {
        "name": "c",
        "volumeMounts": [
            {"name": "a", "mountPath": "/semipd/bin", "readOnly": True},
            {"name": "b", "mountPath": "/semipd"},
            {"name": "b", "mountPath": "/etc/app.conf", "subPath": "conf/app.conf"},
            {"name": "b", "mountPath": "/data/$(X)", "subPathExpr": "p-$(X)"},
        ],
    }
    ms = podvolumes.mounts(c, {"a": "/v/a", "b": "/v/b"}, {"X": "7"})
    assert [m.target for m in ms][:1] == ["/semipd"]
    assert podvolumes.Mount("/v/a", "/semipd/bin", True) in ms
    assert podvolumes.Mount("/v/b/conf/app.conf", "/etc/app.conf", False) in ms
    assert podvolumes.Mount("/v/b/p-7", "/data/$(X)", False) in ms
    with pytest.raises(PodConfigError, match="names no volume"):
        podvolumes.mounts({"name": "c", "volumeMounts": [{"name": "z", "mountPath": "/z"}]}, {}, {})


def test_restart_rules_and_backoff() -> None:
    assert podspec.should_restart("Always", 0)
    assert podspec.should_restart("OnFailure", 1)
    assert not podspec.should_restart("OnFailure", 0)
    assert not podspec.should_restart("Never", 1)
    assert [podspec.backoff_delay(n, base=1, cap=5) for n in range(5)] == [0, 1, 2, 4, 5]
    p = pod(restartPolicy="Always")
    assert podspec.restart_policy(p, {"name": "i"}, init=True) == "OnFailure"
    assert podspec.restart_policy(p, {"name": "s", "restartPolicy": "Always"}, init=True) == "Always"
    assert podspec.restart_policy(pod(restartPolicy="Never"), {"name": "i"}, init=True) == "Never"


def _state(exit_code: int | None, running: bool = False) -> ContainerState:
    s = ContainerState("c", "i")
    if running:
        s.state = {"running": {}}
    elif exit_code is not None:
        s.state = {"terminated": {"exitCode": exit_code}}
    return s


def test_pod_phase() -> None:
    assert podspec.pod_phase("Always", [_state(None)], initialized=False, failed_init=False) == "Pending"
    assert podspec.pod_phase("Never", [_state(None)], initialized=True, failed_init=True) == "Failed"
    assert (
        podspec.pod_phase("Never", [_state(0), _state(None, running=True)], initialized=True, failed_init=False)
        == "Running"
    )
    assert podspec.pod_phase("Never", [_state(0), _state(0)], initialized=True, failed_init=False) == "Succeeded"
    assert podspec.pod_phase("Never", [_state(0), _state(2)], initialized=True, failed_init=False) == "Failed"
    assert podspec.pod_phase("OnFailure", [_state(2)], initialized=True, failed_init=False) == "Running"
    assert podspec.pod_phase("Always", [_state(0)], initialized=True, failed_init=False) == "Running"


def test_conditions_keep_transition_time_until_status_changes() -> None:
    first = podspec.conditions("t1", initialized=True, ready=False, previous=[])
    second = podspec.conditions("t2", initialized=True, ready=True, previous=first)
    by_type = {c["type"]: c for c in second}
    assert by_type["Initialized"]["lastTransitionTime"] == "t1"
    assert by_type["Ready"] == {"type": "Ready", "status": "True", "lastTransitionTime": "t2", "lastProbeTime": None}


def test_probe_parsing_named_ports() -> None:
    c = {
        "name": "c",
        "ports": [{"name": "http", "containerPort": 8000}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 2},
    }
    p = podspec.probe(c, "readinessProbe", "127.10.0.5")
    assert p is not None
    assert (p.kind, p.host, p.port, p.path, p.period) == ("httpGet", "127.10.0.5", 8000, "/health", 2.0)
    assert podspec.probe(c, "livenessProbe", "x") is None
    with pytest.raises(PodConfigError, match="named port"):
        podspec.probe({"name": "c", "readinessProbe": {"tcpSocket": {"port": "nope"}}}, "readinessProbe", "x")


def test_decode_secret_and_configmap_binary() -> None:
    assert podvolumes.decode_secret({"a": base64.b64encode(b"\x00\x01").decode()}) == {"a": b"\x00\x01"}
    binary = {"b": base64.b64encode(b"\xff").decode()}
    assert podvolumes.encode_configmap({"t": "x"}, binary) == {"t": b"x", "b": b"\xff"}


# --- nodes ----------------------------------------------------------------------------------


def test_plan_nodes_assigns_disjoint_loopback_cidrs_and_keeps_existing() -> None:
    pools = nodes.default_pools()
    plan = nodes.plan_nodes(pools, {}, 23)
    assert [m["metadata"]["name"] for m in plan.create] == [
        "gpu-h200-0",
        "gpu-h200-1",
        "gpu-h200-2",
        "gpu-h200-3",
        "ascend-910b-0",
        "ascend-910b-1",
    ]
    cidrs = [ipaddress.ip_network(m["spec"]["podCIDR"]) for m in plan.create]
    assert all(c.subnet_of(ipaddress.ip_network("127.23.0.0/16")) for c in cidrs)
    assert len(set(cidrs)) == 6
    assert all(ipaddress.ip_address("127.0.0.1") not in c for c in cidrs)
    node_ips = [m["status"]["addresses"][0]["address"] for m in plan.create]
    assert node_ips == [f"127.23.255.{i}" for i in range(1, 7)]
    gpu = plan.create[0]
    assert gpu["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert gpu["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    npu = plan.create[4]
    assert npu["spec"]["taints"] == [{"key": "huawei.com/Ascend910", "value": "present", "effect": "NoSchedule"}]

    existing = {"gpu-h200-0": "127.23.7.0/24", "old-0": "127.23.0.0/24"}
    plan2 = nodes.plan_nodes([nodes.gpu_pool(count=2)], existing, 23)
    assert plan2.delete == ["old-0"]
    assert [m["metadata"]["name"] for m in plan2.create] == ["gpu-h200-1"]
    # Neither the kept node's CIDR nor the one of the node being deleted is handed out again.
    assert plan2.create[0]["spec"]["podCIDR"] == "127.23.1.0/24"


def test_plan_nodes_rejects_duplicate_names() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        nodes.plan_nodes([nodes.gpu_pool("x", 1), nodes.ascend_pool("x", 1)], {}, 23)


# --- kwok / prometheus ----------------------------------------------------------------------


def _fake_stage_dir(tmp_path: Path) -> Path:
    for rel in kwok.UPSTREAM_STAGES:
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        name = Path(rel).stem
        path.write_text(
            f"apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata: {{name: {name}}}\n"
            "spec:\n  selector:\n    matchExpressions: []\n"
        )
    return tmp_path


def test_kwok_pod_stages_leave_local_exec_pods_to_the_kubelet(tmp_path: Path) -> None:
    stages = {s["metadata"]["name"]: s for s in kwok.stages(_fake_stage_dir(tmp_path))}
    key = f'.metadata.annotations["{LOCAL_EXEC_ANNOTATION}"]'
    for name in ("pod-ready", "pod-complete", "pod-delete"):
        assert {"key": key, "operator": "NotIn", "values": ["true"]} in stages[name]["spec"]["selector"][
            "matchExpressions"
        ]
    assert stages["node-initialize"]["spec"]["selector"]["matchExpressions"] == []
    ours = stages["semipd-local-exec-assign-ip"]["spec"]
    assert {"key": key, "operator": "In", "values": ["true"]} in ours["selector"]["matchExpressions"]
    assert "phase: Pending" in ours["next"]["statusTemplate"]


def test_kwok_stages_missing_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"build-binaries\.sh"):
        kwok.stages(tmp_path)


def test_prometheus_config_discovers_annotated_pods_by_ip(tmp_path: Path) -> None:
    cfg = prometheus.config("https://127.0.0.1:6443", Pki(tmp_path), 9090)
    own, job = cfg["scrape_configs"]
    assert own["static_configs"] == [{"targets": ["127.0.0.1:9090"]}]
    assert job["kubernetes_sd_configs"][0]["role"] == "pod"
    assert job["kubernetes_sd_configs"][0]["api_server"] == "https://127.0.0.1:6443"
    relabel = job["relabel_configs"]
    assert relabel[0] == {
        "source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_scrape"],
        "action": "keep",
        "regex": "true",
    }
    address = next(r for r in relabel if r.get("target_label") == "__address__")
    assert address["source_labels"] == [
        "__meta_kubernetes_pod_ip",
        "__meta_kubernetes_pod_annotation_prometheus_io_port",
    ]
    assert cfg["global"]["scrape_interval"] == "2s"
    # Labels the operator rewrites on live pods never become target labels (series would churn).
    labelmap = next(i for i, r in enumerate(relabel) if r.get("action") == "labelmap")
    dropped = [r["regex"] for r in relabel[labelmap:] if r.get("action") == "labeldrop"]
    assert "llm_d_ai_context_length_range" in dropped


# --- address slices -------------------------------------------------------------------------


def test_choose_octet_skips_leased_and_busy_slices() -> None:
    assert addresses.choose_octet([], []) == addresses.FIRST_OCTET
    assert addresses.choose_octet([10, 11], [12]) == 13
    with pytest.raises(RuntimeError, match="no free"):
        addresses.choose_octet(range(addresses.FIRST_OCTET, addresses.LAST_OCTET + 1), [])


def test_parse_proc_net_tcp_finds_loopback_slices() -> None:
    dump = (
        "  sl  local_address rem_address   st\n"
        "   0: 0100007F:1F90 00000000:0000 0A\n"  # 127.0.0.1:8080
        "   1: 01000A7F:2382 00000000:0000 0A\n"  # 127.10.0.1:9090
        "   2: 0100000A:0016 00000000:0000 0A\n"  # 10.0.0.1:22
    )
    assert addresses.parse_proc_net_tcp(dump) == {0, 10}


def test_address_leases_exclude_each_other_and_release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEMIPD_ADDRESS_LEASES", str(tmp_path))
    monkeypatch.setattr(addresses, "busy_octets", set)
    first = addresses.acquire("run-a", tmp_path / "a")
    second = addresses.acquire("run-b", tmp_path / "b")  # run-a's taker (this process) is alive
    assert first != second
    addresses.release(first, "run-a")
    assert addresses.acquire("run-c", tmp_path / "c") == first
    addresses.release(second, "someone-else")  # not the holder: no effect
    assert (tmp_path / f"127.{second}").exists()
