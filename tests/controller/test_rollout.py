from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from semipd.api.v1alpha1 import InferencePool, InferencePoolSpec
from semipd.controller.agents import ready_pod_ips
from semipd.controller.rollout import pool_health
from semipd.controller.tokens import pool_token

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sim-mixed-gpu-ascend.yaml"


def _spec() -> InferencePoolSpec:
    return InferencePool.model_validate(yaml.safe_load(EXAMPLE.read_text())).spec


def _dep(desired: int, ready: int, updated: int | None = None, gen: int = 2, seen: int = 2) -> dict[str, Any]:
    return {
        "metadata": {"generation": gen},
        "spec": {"replicas": desired},
        "status": {
            "replicas": desired,
            "readyReplicas": ready,
            "updatedReplicas": desired if updated is None else updated,
            "observedGeneration": seen,
        },
    }


def _pod(name: str, node_pool: str, *, ready: bool = True, **status: Any) -> dict[str, Any]:
    conds = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {
        "metadata": {"name": name, "labels": {"semipd.io/node-pool": node_pool}},
        "status": {"phase": "Running", "podIP": "127.10.0.5", "conditions": conds, **status},
    }


SUPPORTED = {"h200": True, "ascend": True}


def test_steady_pool_is_ready_not_progressing_not_degraded() -> None:
    h = pool_health(
        _spec(), "demo", {"h200": _dep(1, 1), "ascend": _dep(0, 0)}, [_pod("p1", "h200")], {"p1": (50, 100)}, SUPPORTED
    )
    assert (h.ready.status, h.progressing.status, h.degraded.status) == (True, False, False)
    assert h.node_pools[0].splits[0].prefill_percent == 50
    assert h.node_pools[0].ready_replicas == 1


def test_rollout_and_missing_minimum() -> None:
    h = pool_health(_spec(), "demo", {"h200": _dep(1, 0, updated=0, gen=3, seen=2), "ascend": None}, [], {}, SUPPORTED)
    assert h.ready.status is False
    assert "h200 has 0/1 ready" in h.ready.message
    assert h.progressing.status is True


def test_unschedulable_and_crashing_pods_degrade() -> None:
    pending = {
        "metadata": {"name": "p2", "labels": {"semipd.io/node-pool": "h200"}},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/6 nodes are available: 4 Insufficient nvidia.com/gpu.",
                }
            ],
        },
    }
    crash = _pod(
        "p3",
        "ascend",
        ready=False,
        containerStatuses=[
            {
                "name": "engine",
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"exitCode": 3}},
            }
        ],
    )
    h = pool_health(_spec(), "demo", {"h200": _dep(1, 1), "ascend": _dep(1, 0)}, [pending, crash], {}, SUPPORTED)
    assert h.degraded.status is True
    assert "Insufficient nvidia.com/gpu" in h.degraded.message
    assert "CrashLoopBackOff (last exit code 3)" in h.degraded.message


def test_only_ready_running_pods_are_asked_for_splits() -> None:
    pods = [
        _pod("a", "h200"),
        _pod("b", "h200", ready=False),
        {"metadata": {"name": "c"}, "status": {"phase": "Pending"}},
    ]
    assert ready_pod_ips(pods) == {"a": "127.10.0.5"}


def test_tokens_are_stable_and_distinct_per_pool() -> None:
    key = b"k" * 32
    assert pool_token(key, "ns", "a", "u1") == pool_token(key, "ns", "a", "u1")
    assert pool_token(key, "ns", "a", "u1") != pool_token(key, "ns", "a", "u2")
    assert pool_token(key, "ns", "a", "u1") != pool_token(b"j" * 32, "ns", "a", "u1")
