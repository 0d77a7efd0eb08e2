"""Desired-state builders: every owned object, derived only from the spec and the inputs passed in."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from semipd.api.v1alpha1 import InferencePool, InferencePoolSpec
from semipd.desired import names
from semipd.desired.owner import Owner
from semipd.desired.pool import desired_children
from semipd.desired.workload import WorkloadSettings, desired_replicas, token_hash

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
OWNER = Owner("demo", "ns", "uid-1")
SETTINGS = WorkloadSettings(pod_annotations={"semipd.io/local-exec": "true"})


def _spec(name: str = "sim-mixed-gpu-ascend.yaml") -> InferencePoolSpec:
    return InferencePool.model_validate(yaml.safe_load((EXAMPLES / name).read_text())).spec


def _build(spec: InferencePoolSpec, gie: bool = True, replicas: dict[str, int] | None = None) -> list[dict[str, Any]]:
    replicas = replicas or {p.name: p.min_replicas for p in spec.node_pools}
    return desired_children(OWNER, spec, token="s3cret", replicas=replicas, settings=SETTINGS, gie_installed=gie)


def _by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def test_every_child_is_owned_and_labelled() -> None:
    for obj in _build(_spec()):
        meta = obj["metadata"]
        assert meta["namespace"] == "ns"
        (ref,) = meta["ownerReferences"]
        assert ref == {
            "apiVersion": "semipd.io/v1alpha1",
            "kind": "InferencePool",
            "name": "demo",
            "uid": "uid-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
        assert meta["labels"][names.POOL_LABEL] == "demo"


def test_one_deployment_and_pdb_per_node_pool_and_one_gie_pool_per_vendor() -> None:
    objs = _build(_spec())
    assert [d["metadata"]["name"] for d in _by_kind(objs, "Deployment")] == ["demo-h200", "demo-ascend"]
    assert [d["metadata"]["name"] for d in _by_kind(objs, "PodDisruptionBudget")] == ["demo-h200", "demo-ascend"]
    gie = _by_kind(objs, "InferencePool")
    assert [g["metadata"]["name"] for g in gie] == ["demo-ascend", "demo-nvidia"]
    assert gie[1]["spec"]["selector"]["matchLabels"] == {names.POOL_LABEL: "demo", names.ACCELERATOR_LABEL: "nvidia"}
    assert gie[1]["spec"]["targetPorts"] == [{"number": 8000}]
    assert "endpointPickerRef" not in gie[1]["spec"]
    assert not _by_kind(_build(_spec(), gie=False), "InferencePool")


def test_secret_carries_the_token_and_the_pods_its_digest() -> None:
    objs = _build(_spec())
    (secret,) = _by_kind(objs, "Secret")
    assert base64.b64decode(secret["data"]["token"]).decode() == "s3cret"
    template = _by_kind(objs, "Deployment")[0]["spec"]["template"]
    assert template["metadata"]["annotations"][names.TOKEN_HASH_ANNOTATION] == token_hash("s3cret")
    assert "s3cret" not in yaml.safe_dump(_by_kind(objs, "Deployment"))


def test_gpu_deployment_pod_template() -> None:
    dep = _by_kind(_build(_spec(), replicas={"h200": 3, "ascend": 0}), "Deployment")[0]
    assert dep["spec"]["replicas"] == 3
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    pod = dep["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert labels["llm-d.ai/role"] == "prefill-decode"
    assert labels[names.ACCELERATOR_LABEL] == "nvidia"
    assert dep["spec"]["selector"]["matchLabels"] == {names.POOL_LABEL: "demo", names.NODE_POOL_LABEL: "h200"}
    ann = pod["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true"
    assert ann["semipd.io/local-exec"] == "true"
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200"}
    assert "tolerations" not in spec
    (init,) = spec["initContainers"]
    assert init["command"] == ["python3", "-m", "semipd.agent.build", "/semipd/agent.pyz"]
    (engine,) = spec["containers"]
    cmd = engine["command"]
    assert cmd[:4] == ["python3", "/semipd/agent.pyz", "--driver", "sim"]
    assert cmd[cmd.index("--prefill-percent") + 1] == "50"
    assert cmd[cmd.index("--prefill-max") + 1] == "90"
    assert "--" in cmd
    assert cmd[cmd.index("--") + 1 :][:3] == ["python3", "-m", "semipd"]
    assert engine["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert engine["resources"]["requests"]["nvidia.com/gpu"] == "1"
    assert engine["startupProbe"]["failureThreshold"] * engine["startupProbe"]["periodSeconds"] >= 300
    assert engine["livenessProbe"]["httpGet"]["port"] == 9090
    mounts = {m["mountPath"] for m in engine["volumeMounts"]}
    assert {"/dev/shm", "/semipd", "/var/run/semipd"} <= mounts
    shm = next(v for v in spec["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"]["medium"] == "Memory"
    assert engine["securityContext"]["allowPrivilegeEscalation"] is False
    assert engine["securityContext"]["runAsNonRoot"] is True
    assert spec["terminationGracePeriodSeconds"] == 60
    assert cmd[cmd.index("--drain-delay") + 1] == "5"
    assert cmd[cmd.index("--drain-timeout") + 1] == "45"
    # Restart mode: readiness stays off until the kubelet has seen enough failed probes to drop the pod.
    probe = engine["readinessProbe"]
    lame_duck = int(cmd[cmd.index("--restart-drain-seconds") + 1])
    assert lame_duck >= probe["periodSeconds"] * probe["failureThreshold"]
    assert engine["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 9090, "scheme": "HTTP"}
    assert "tcpSocket" not in engine["startupProbe"]


def test_ascend_deployment_tolerates_the_taint_and_requests_npus() -> None:
    dep = _by_kind(_build(_spec()), "Deployment")[1]
    spec = dep["spec"]["template"]["spec"]
    assert spec["tolerations"] == [{"key": "huawei.com/Ascend910", "operator": "Exists", "effect": "NoSchedule"}]
    assert spec["containers"][0]["resources"]["limits"]["huawei.com/Ascend910"] == "1"


def test_real_engines_get_their_image_and_no_split_flags_when_they_cannot_split() -> None:
    deps = _by_kind(_build(_spec("mixed-gpu-ascend.yaml")), "Deployment")
    gpu, ascend = (d["spec"]["template"]["spec"]["containers"][0] for d in deps)
    assert gpu["image"] == "registry.example.com/semi-pd/sglang:0.4.4-semipd"
    assert "--driver" in gpu["command"]
    assert gpu["command"][gpu["command"].index("--driver") + 1] == "sglang-semipd"
    assert ascend["command"][ascend["command"].index("--driver") + 1] == "vllm-ascend"
    assert "--prefill-percent" not in ascend["command"]
    assert ascend["resources"]["limits"]["huawei.com/Ascend910"] == "4"


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_children_validate_against_kubernetes_schemas(example: str) -> None:
    for obj in _build(_spec(example), gie=False):
        kubernetes_validate.validate(obj, "1.35", strict=True)


def test_builders_are_deterministic() -> None:
    assert _build(_spec()) == _build(_spec())


@pytest.mark.parametrize(
    ("current", "decided", "expected"), [(None, None, 1), (3, None, 3), (9, None, 4), (0, None, 1), (2, 4, 4)]
)
def test_desired_replicas_respects_bounds(current: int | None, decided: int | None, expected: int) -> None:
    pool = _spec().node_pools[0]  # min 1, max 4
    assert desired_replicas(pool, current, decided) == expected
