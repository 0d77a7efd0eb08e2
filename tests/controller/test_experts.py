"""The expert placement step: actuation paths, topology checks, the pure plan, and one InferencePool's
evaluations against in-memory stand-ins for the apiserver, the agents and Prometheus."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pytest

from semipd.api.v1alpha1 import EngineKind, ExpertPlacementStatus, InferencePoolSpec
from semipd.context import Actuation, PoolFacts, actuation_of, pool_facts
from semipd.controller import experts as step
from semipd.controller.view import AutoscaleView
from semipd.desired import experts as desired
from semipd.desired.owner import Owner
from semipd.engines.capabilities import CAPABILITIES, EngineCapabilities, SwitchMode
from semipd.perf.moe import layer_hit_probabilities
from semipd.policy.experts.formats import ExpertPlacementDoc
from semipd.policy.experts.metrics import PlacementQuality
from semipd.policy.experts.rebalance import ExpertTopology, plan_rebalance, topology_of
from semipd.policy.experts.trigger import TriggerPolicy

NS, NAME, NP = "ml", "moe", "h200"
LAYERS, EXPERTS, DEVICES, REDUNDANT = 6, 32, 4, 8
T0 = 1_800_000_000.0


def spec(kind: str = "sim", redundant: int = REDUNDANT, enabled: bool = True) -> InferencePoolSpec:
    engine: dict[str, Any] = {"kind": kind} if kind == "sim" else {"kind": kind, "image": "registry.example/e:1"}
    return InferencePoolSpec.model_validate(
        {
            "model": {"name": "m", "source": "hf://x/y", "architecture": "moe", "experts": EXPERTS,
                      "expertsPerToken": 4, "profile": "qwen3-30b-a3b"},
            "engine": engine,
            "nodePools": [{"name": NP, "accelerator": "nvidia", "acceleratorsPerReplica": DEVICES,
                           "minReplicas": 1, "maxReplicas": 2}],
            "slo": {"ttftP99": "1s", "itlP99": "100ms"},
            "placement": {"experts": {"enabled": enabled, "redundantExperts": redundant, "rebalanceThreshold": 1.3,
                                      "rebalanceWindow": "20s", "rebalanceInterval": "10m"}},
        }
    )  # fmt: skip


def skewed() -> np.ndarray:
    return 1000.0 * np.asarray(layer_hit_probabilities(LAYERS, EXPERTS, 4, 1.4, seed=2))


# --- pure parts ----------------------------------------------------------------------------------


def test_actuation_follows_engine_capabilities_and_the_agent_driver() -> None:
    assert actuation_of("sim") == Actuation.AGENT
    assert actuation_of("vllm") == Actuation.ENGINE
    assert actuation_of("vllm-ascend") == Actuation.ENGINE
    assert actuation_of("sglang-semipd") == Actuation.NONE
    assert actuation_of("mindie") == Actuation.NONE
    base = CAPABILITIES[EngineKind.SGLANG_SEMIPD]
    startup = EngineCapabilities(base.accelerators, SwitchMode.RESTART, reads_expert_map_at_startup=True)
    assert actuation_of("sglang-semipd", startup) == Actuation.ROLLING_RESTART
    # Capability without an agent that can forward maps: the engine's own EPLB.
    online = EngineCapabilities(base.accelerators, SwitchMode.RESTART, supports_expert_rebalance=True)
    assert actuation_of("sglang-semipd", online) == Actuation.ENGINE


def test_topology_needs_slots_that_split_over_the_devices() -> None:
    s = spec()
    assert topology_of(s, s.node_pools[0]) == ExpertTopology(EXPERTS, EXPERTS + REDUNDANT, DEVICES)
    bad = spec(redundant=6)
    message = topology_of(bad, bad.node_pools[0])
    assert isinstance(message, str)
    assert "32 experts + 6 redundant slots on 4 devices" in message
    assert "multiple of EP" in message


def test_trivial_map_is_the_engines_default() -> None:
    assert ExpertTopology(4, 6, 2).trivial(2).tolist() == [[0, 1, 2, 3, 0, 1]] * 2


POLICY = TriggerPolicy(1.3, 20.0, 600.0)


def test_plan_holds_until_the_imbalance_lasted_the_window_then_improves_the_map() -> None:
    topo = ExpertTopology(EXPERTS, EXPERTS + REDUNDANT, DEVICES)
    w, current = skewed(), topo.trivial(LAYERS)
    worst = PlacementQuality.of(w, current, DEVICES).worst_max_over_mean
    assert worst > 1.3
    early = plan_rebalance(w, current, topo, [(T0, worst)], T0 + 10, None, POLICY)
    assert early.trigger.reason == "ImbalancePending"
    assert early.phy2log is None
    history = [(T0 + t, worst) for t in range(0, 25, 5)]
    plan = plan_rebalance(w, current, topo, history, T0 + 25, None, POLICY)
    assert plan.trigger.reason == "ImbalanceSustained"
    assert plan.phy2log is not None
    assert plan.after is not None
    assert plan.phy2log.shape == (LAYERS, EXPERTS + REDUNDANT)
    assert plan.after.worst_max_over_mean < 1.3 < plan.before.worst_max_over_mean
    assert plan.after.sglang > plan.before.sglang
    # After a rebalance at T0+30, samples from before it do not count; a new sustained run waits
    # for the interval.
    fresh = plan_rebalance(w, current, topo, history, T0 + 40, T0 + 30, POLICY)
    assert fresh.trigger.reason == "ImbalancePending"
    later = [(T0 + t, worst) for t in range(35, 60, 5)]
    held = plan_rebalance(w, current, topo, later, T0 + 60, T0 + 30, POLICY)
    assert held.trigger.reason == "RebalanceIntervalNotElapsed"


def test_plan_refuses_a_map_that_does_not_improve() -> None:
    # Two experts on two devices without redundancy: no map can do better than the one in force.
    topo = ExpertTopology(2, 2, 2)
    w = np.array([[10.0, 1.0]])
    history = [(T0 + t, 10 / 5.5) for t in range(0, 25, 5)]
    plan = plan_rebalance(w, topo.trivial(1), topo, history, T0 + 25, None, POLICY)
    assert plan.trigger.reason == "NoImprovement"
    assert not plan.trigger.rebalance
    assert plan.phy2log is None


# --- the shell against stand-ins --------------------------------------------------------------------


@dataclass
class Children:
    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    applies: list[tuple[dict[str, Any], str]] = field(default_factory=list)

    async def apply(self, body: dict[str, Any], *, manager_suffix: str = "") -> dict[str, Any]:
        self.applies.append((body, manager_suffix))
        meta = body["metadata"]
        self.objects[(body["kind"], meta["namespace"], meta["name"])] = body
        return body

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((kind, namespace, name))


@dataclass
class Agents:
    versions: dict[str, int]
    puts: list[tuple[str, int]] = field(default_factory=list)
    refuse: set[str] = field(default_factory=set)

    def _pod(self, ip: str) -> str:
        return ip.replace("10.0.0.", "p")

    async def experts(self, ip: str, port: int, token: str) -> dict[str, Any] | None:
        return {"supported": True, "version": self.versions[self._pod(ip)]}

    async def set_experts(self, ip: str, port: int, token: str, envelope: str, timeout: float = 60.0) -> str | None:
        version = ExpertPlacementDoc.from_json(envelope).version
        self.puts.append((self._pod(ip), version))
        if self._pod(ip) in self.refuse:
            return "HTTP 502: engine unreachable"
        self.versions[self._pod(ip)] = version
        return None


@dataclass
class Prometheus:
    weight: np.ndarray
    queries: list[str] = field(default_factory=list)

    async def query(self, promql: str) -> list[tuple[dict[str, str], float | None]]:
        self.queries.append(promql)
        return [
            ({"layer": str(layer), "expert": str(e)}, float(v))
            for layer, row in enumerate(self.weight)
            for e, v in enumerate(row)
        ]


@dataclass
class Ctx:
    children: Children
    agents: Agents


def pod(name: str, version: int | None = None) -> dict[str, Any]:
    annotations = {} if version is None else {desired.VERSION_LABEL: str(version)}
    return {
        "metadata": {"name": name, "annotations": annotations},
        "status": {"phase": "Running", "podIP": "10.0.0." + name[1:],
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }  # fmt: skip


BODY = {"metadata": {"name": NAME, "namespace": NS, "uid": "uid-1"}}


async def evaluate(
    ctx: Ctx,
    s: InferencePoolSpec,
    source: Prometheus,
    view: AutoscaleView,
    now: float,
    pods: Any,
    actuation: Actuation | None = None,
) -> Any:
    facts = pool_facts(s)
    if actuation is not None:  # an engine kind with this actuation path (none of ours reads maps at start-up)
        facts = PoolFacts({NP: replace(facts[NP], actuation=actuation)})
    return await step.place_experts(ctx, BODY, s, facts, source, {NP: pods}, "tok", view, now)


async def test_sustained_imbalance_writes_version_1_and_pushes_it_to_every_ready_pod() -> None:
    ctx = Ctx(Children(), Agents({"p1": 0, "p2": 0}))
    source, view, s = Prometheus(skewed()), AutoscaleView(), spec()
    pods = [pod("p1"), pod("p2")]
    for t in range(0, 20, 5):
        assert await evaluate(ctx, s, source, view, T0 + t, pods) == []
        assert view.experts[NP].reason in ("ImbalancePending", "NoImbalanceData")
    assert 'namespace="ml",pod=~"p1|p2"' in source.queries[0]
    assert "increase(semipd_sim_expert_tokens_total" in source.queries[0]
    assert "[20s]" in source.queries[0]
    assert ctx.children.applies == []
    decisions = await evaluate(ctx, s, source, view, T0 + 20, pods)
    assert [d.action for d in decisions] == ["ExpertRebalance"]
    assert decisions[0].reason == "ImbalanceSustained"
    assert decisions[0].details["version"] == "1"
    assert decisions[0].details["actuation"] == "Agent"
    ((cm, suffix),) = ctx.children.applies
    assert suffix == ""
    assert cm["metadata"]["name"] == "moe-h200-experts"
    stored = desired.read_configmap(cm)
    assert stored.doc.version == 1
    assert stored.doc.phy2log.shape == (LAYERS, EXPERTS + REDUNDANT)
    assert ctx.agents.puts == [("p1", 1), ("p2", 1)]
    status = view.experts[NP]
    assert (status.version, status.applied, status.config_map) == (1, "2/2", "moe-h200-experts")
    assert status.max_mean_before is not None
    assert status.max_mean_after is not None
    assert status.max_mean_before > 1.3 > status.max_mean_after
    assert status.balancedness_after is not None
    assert status.balancedness_before is not None
    assert status.balancedness_after > status.balancedness_before
    assert status.last_rebalance == "2027-01-15T08:00:20Z"
    assert status.actuation == "Agent"
    assert status.max_mean_now == pytest.approx(status.max_mean_before, abs=1e-4)  # measured under the old map
    # Next evaluation: balanced under the new map, nothing written or pushed again.
    assert await evaluate(ctx, s, source, view, T0 + 25, pods) == []
    assert view.experts[NP].reason == "Balanced"
    now = view.experts[NP].max_mean_now
    assert now is not None
    assert now < 1.3
    assert len(ctx.children.applies) == 1
    assert len(ctx.agents.puts) == 2


async def test_the_version_is_read_back_after_a_restart_and_lagging_pods_are_brought_up() -> None:
    ctx = Ctx(Children(), Agents({"p1": 0, "p2": 0}))
    source, s, pods = Prometheus(skewed()), spec(), [pod("p1"), pod("p2")]
    view = AutoscaleView()
    for t in range(0, 25, 5):
        await evaluate(ctx, s, source, view, T0 + t, pods)
    assert view.experts[NP].version == 1
    # Operator restart: memory gone, a new pod p3 still on the trivial map.
    ctx.agents.versions["p3"] = 0
    view = AutoscaleView()
    pods = [*pods, pod("p3")]
    for t in range(100, 160, 5):
        assert await evaluate(ctx, s, source, view, T0 + t, pods) == []
    assert len(ctx.children.applies) == 1, "a restart must not write a new version"
    assert ctx.agents.puts[-1] == ("p3", 1)
    assert ctx.agents.versions == {"p1": 1, "p2": 1, "p3": 1}
    status = view.experts[NP]
    assert (status.version, status.applied, status.reason) == (1, "3/3", "Balanced")
    assert status.last_rebalance == "2027-01-15T08:00:20Z"
    assert status.max_mean_before is not None
    assert status.max_mean_before > 1.3


async def test_a_lost_configmap_never_reuses_a_version_the_engines_hold() -> None:
    # The engines hold version 3 (e.g. the ConfigMap was deleted and the operator restarted).
    ctx = Ctx(Children(), Agents({"p1": 3, "p2": 3}))
    source, view, s, pods = Prometheus(skewed()), AutoscaleView(), spec(), [pod("p1"), pod("p2")]
    for t in range(0, 25, 5):
        decisions = await evaluate(ctx, s, source, view, T0 + t, pods)
    assert decisions[0].details["version"] == "4"
    assert desired.read_configmap(ctx.children.applies[0][0]).doc.version == 4
    assert ctx.agents.versions == {"p1": 4, "p2": 4}


async def test_a_foreign_configmap_of_that_name_is_never_written_until_annotated_for_adoption() -> None:
    key = ("ConfigMap", NS, "moe-h200-experts")
    foreign = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"app.conf": "theirs"},
               "metadata": {"name": key[2], "namespace": NS, "labels": {"app": "shop"}}}  # fmt: skip
    ctx = Ctx(Children(objects={key: foreign}), Agents({"p1": 0, "p2": 0}))
    source, view, s, pods = Prometheus(skewed()), AutoscaleView(), spec(), [pod("p1"), pod("p2")]
    for t in range(0, 40, 5):
        assert await evaluate(ctx, s, source, view, T0 + t, pods) == []
    assert ctx.children.applies == []
    assert ctx.agents.puts == []
    assert ctx.children.objects[key]["data"] == {"app.conf": "theirs"}
    status = view.experts[NP]
    assert status.reason == "Conflict"
    assert "ConfigMap ml/moe-h200-experts exists and is not managed by this InferencePool" in status.message
    assert "semipd.io/adopt=moe" in status.message
    # The owner opts in: the next sustained imbalance writes the map over it.
    foreign["metadata"]["annotations"] = {"semipd.io/adopt": NAME}
    for t in range(40, 70, 5):
        decisions = await evaluate(ctx, s, source, view, T0 + t, pods)
        if decisions:
            break
    assert [d.action for d in decisions] == ["ExpertRebalance"]
    assert len(ctx.children.applies) == 1


async def test_a_failed_push_shows_in_applied_and_is_retried_next_time() -> None:
    ctx = Ctx(Children(), Agents({"p1": 0, "p2": 0}, refuse={"p2"}))
    source, view, s, pods = Prometheus(skewed()), AutoscaleView(), spec(), [pod("p1"), pod("p2")]
    for t in range(0, 25, 5):
        decisions = await evaluate(ctx, s, source, view, T0 + t, pods)
    assert "p2: HTTP 502" in decisions[0].message
    assert view.experts[NP].applied == "1/2"
    ctx.agents.refuse.clear()
    await evaluate(ctx, s, source, view, T0 + 30, pods)
    assert ctx.agents.versions["p2"] == 1
    assert view.experts[NP].applied == "2/2"


async def test_engines_reading_maps_at_start_up_get_a_rolling_restart() -> None:
    rolling = Actuation.ROLLING_RESTART
    ctx = Ctx(Children(), Agents({"p1": 0}))
    source, view, s, pods = Prometheus(skewed()), AutoscaleView(), spec(), [pod("p1")]
    for t in range(0, 25, 5):
        decisions = await evaluate(ctx, s, source, view, T0 + t, pods, rolling)
    assert decisions[0].details["actuation"] == "RollingRestart"
    (cm, _), (rollout, suffix) = ctx.children.applies
    assert cm["kind"] == "ConfigMap"
    assert rollout == desired.rollout_intent(Owner(NAME, NS, "uid-1"), NP, 1)
    assert suffix == "-experts"
    assert ctx.agents.puts == []
    assert view.experts[NP].applied == "0/1"
    await evaluate(ctx, s, source, view, T0 + 30, [pod("p1b", version=1)], rolling)
    assert view.experts[NP].applied == "1/1"


@pytest.mark.parametrize(
    ("s", "reason", "words", "actuation"),
    [
        (spec(redundant=6), "InvalidTopology", "38", "Agent"),
        (spec(kind="vllm"), "EngineRebalances", "its own EPLB", "EngineRebalances"),
        (spec(kind="sglang-semipd"), "Unsupported", "neither load", "Unsupported"),
    ],
    ids=["slots-not-divisible", "vllm", "sglang-semipd"],
)
async def test_pools_that_cannot_be_placed_get_a_reason_and_nothing_runs(
    s: InferencePoolSpec, reason: str, words: str, actuation: str
) -> None:
    ctx = Ctx(Children(), Agents({"p1": 0}))
    source, view = Prometheus(skewed()), AutoscaleView()
    for t in range(0, 40, 5):
        assert await evaluate(ctx, s, source, view, T0 + t, [pod("p1")]) == []
    status = view.experts[NP]
    assert status.reason == reason
    assert status.actuation == actuation
    assert words in status.message
    assert status.version == 0
    assert ctx.children.applies == []
    assert ctx.agents.puts == []
    assert source.queries == []


async def test_missing_or_mismatched_load_is_a_reason_not_a_rebalance() -> None:
    ctx = Ctx(Children(), Agents({"p1": 0}))
    view, s = AutoscaleView(), spec()
    await evaluate(ctx, s, Prometheus(np.zeros((LAYERS, EXPERTS))), view, T0, [pod("p1")])
    assert view.experts[NP].reason == "NoExpertLoad"
    await evaluate(ctx, s, Prometheus(np.ones((LAYERS, EXPERTS + 1))), view, T0, [pod("p1")])
    assert view.experts[NP].reason == "NoExpertLoad"
    assert "outside" in view.experts[NP].message
    await evaluate(ctx, s, Prometheus(skewed()), view, T0, [])
    assert view.experts[NP].reason == "NoReadyReplicas"
    assert ctx.children.applies == []


async def test_disabling_placement_clears_the_status() -> None:
    ctx = Ctx(Children(), Agents({"p1": 0}))
    view = AutoscaleView()
    view.experts["removed-pool"] = ExpertPlacementStatus(node_pool="removed-pool", version=2)
    await evaluate(ctx, spec(), Prometheus(skewed()), view, T0, [pod("p1")])
    assert set(view.experts) == {NP}  # a node pool gone from the spec leaves the status
    await evaluate(ctx, spec(enabled=False), Prometheus(skewed()), view, T0 + 5, [pod("p1")])
    assert view.experts == {}
    assert view.placement() is None
