"""Chaos around the operator itself: SIGKILLed at random points of rollouts and scale-outs, and an
engine that crash-loops.

Ten times, a spec change (a new engine flag, so a rollout, and a replica count alternating 1 <-> 2)
is applied and the operator is SIGKILLed 0-3 s later, then restarted: afterwards the pool converges
to the last spec with exactly its objects (nothing duplicated, nothing orphaned). A crash-looping
engine makes the pool Degraded naming the pod and the reason, and the autoscaler adds no replicas
onto failing pods. Figures go to `<run dir>/chaos-figures.json`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.chaos import ChaosPool, chaos_operator, record
from e2e.harness import wait_until
from e2e.operator_process import OperatorProcess

pytestmark = pytest.mark.e2e

KILLS = 10


@pytest.fixture(scope="module")
def pool(cluster: Any) -> ChaosPool:
    return ChaosPool(cluster, "chaos-op-e2e", "chaosop")


@pytest.fixture(scope="module")
def operator(cluster: Any, pool: ChaosPool, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    with chaos_operator(cluster, pool.ns, tmp_path_factory.mktemp("chaos-op")) as op:
        pool.apply(1)
        pool.wait_replicas(1)
        yield op


def max_running(pod: dict[str, Any]) -> str:
    cmd = pod["spec"]["containers"][0]["command"]
    return str(cmd[cmd.index("--max-running") + 1]) if "--max-running" in cmd else ""


@pytest.mark.timeout(1200)  # ten operator start-ups; each takes 5-30 s on a loaded machine
def test_ten_sigkills_during_rollouts_and_scale_outs_converge(pool: ChaosPool, operator: OperatorProcess) -> None:
    rng = random.Random(14)
    delays = []
    for i in range(KILLS):
        replicas = 1 + (i + 1) % 2  # 2, 1, 2, ...: every change is also a scale-out or scale-in
        pool.apply(replicas, ["--speedup", "50", "--max-running", str(16 + i)])
        delay = rng.uniform(0, 3)
        delays.append(delay)
        time.sleep(delay)
        operator.kill()
        operator.start()
    t0 = time.monotonic()
    last = str(16 + KILLS - 1)
    final_replicas = 1 + KILLS % 2

    def converged() -> bool:
        obj = pool.pool()
        pods = pool.pods()
        return (
            (obj.get("status") or {}).get("observedGeneration") == obj["metadata"]["generation"]
            and pool.ready_replicas() == final_replicas
            and len(pods) == final_replicas
            and all(max_running(p) == last for p in pods)
        )

    wait_until(converged, timeout=240, what="convergence after the last restart")
    took = time.monotonic() - t0
    assert pool.owned() == pool.expected()
    assert pool.deployment()["spec"]["replicas"] == final_replicas
    record(
        pool.cluster,
        "operator_sigkill_x10",
        {
            "kills": float(KILLS),
            "kill_delay_min_s": min(delays),
            "kill_delay_max_s": max(delays),
            "converged_after_last_restart_s": took,
            "duplicated_or_orphaned_objects": float(len(pool.owned()) - len(pool.expected())),
        },
    )


def test_a_crash_looping_engine_degrades_the_pool_without_scaling_out(
    pool: ChaosPool, operator: OperatorProcess
) -> None:
    pool.apply(1, ["--speedup", "50"])
    pool.wait_replicas(1)
    t0 = time.monotonic()
    pool.apply(1, ["--no-such-flag"])  # the engine refuses its arguments, the agent exits with it

    def degraded() -> dict[str, Any] | None:
        cond = pool.condition("Degraded")
        return cond if cond.get("status") == "True" and "CrashLoopBackOff" in cond.get("message", "") else None

    cond = wait_until(degraded, timeout=120, what="Degraded naming CrashLoopBackOff")
    to_degraded = time.monotonic() - t0
    assert f"pod {pool.name}-h200-" in cond["message"]
    # Six autoscaling intervals (5 s) later: still one replica, no scale-out decision.
    time.sleep(30)
    assert pool.deployment()["spec"]["replicas"] == 1
    decisions = (pool.pool().get("status") or {}).get("decisions") or []
    since = cond["lastTransitionTime"]
    assert not [d for d in decisions if d.get("action") == "ScaleOut" and d.get("time", "") >= since]
    t1 = time.monotonic()
    pool.apply(1, ["--speedup", "50"])
    wait_until(lambda: pool.condition("Degraded").get("status") == "False", timeout=120, what="Degraded cleared")
    pool.wait_replicas(1)
    assert pool.owned() == pool.expected()
    record(
        pool.cluster,
        "crash_looping_engine",
        {
            "degraded_after_s": to_degraded,
            "replicas_added_onto_failing_pods": 0.0,
            "recovered_after_fix_s": time.monotonic() - t1,
        },
    )
