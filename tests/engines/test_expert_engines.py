"""Engine-side facts of expert placement: the simulator's EP flags, the per-expert load PromQL, capabilities."""

from __future__ import annotations

import pytest

from semipd.agent.drivers import DRIVERS as AGENT_DRIVERS
from semipd.engines import get_driver
from semipd.engines.capabilities import CAPABILITIES
from semipd.engines.sim import SIM
from semipd.sim.engine.config import parse_config
from tests.engines.test_engine_drivers import ctx_of, pool_spec

MOE = {"architecture": "moe", "experts": 128, "expertsPerToken": 8, "profile": "qwen3-30b-a3b"}


def test_sim_command_carries_the_redundant_slots_only_with_placement_enabled() -> None:
    on = pool_spec("sim", model=MOE, placement={"experts": {"enabled": True, "redundantExperts": 32}})
    cmd = SIM.engine_command(ctx_of(on))
    assert cmd[cmd.index("--ep-num-redundant-experts") + 1] == "32"
    off = pool_spec("sim", model=MOE)
    assert "--ep-num-redundant-experts" not in SIM.engine_command(ctx_of(off))
    # The engine accepts what the driver renders (EP size defaults to TP).
    argv = [a.replace("$(POD_IP)", "127.0.0.1") for a in cmd[4:]]
    cfg = parse_config(argv, env={})
    assert (cfg.redundant_experts, cfg.ep_size, cfg.tp) == (32, None, 2)


def test_expert_load_query_is_the_simulators_counter_increase() -> None:
    q = get_driver("sim").metrics.expert_load("20s", 'namespace="ml",pod=~"a|b"')
    assert q == ('sum by (layer, expert) (increase(semipd_sim_expert_tokens_total{namespace="ml",pod=~"a|b"}[20s]))')
    with pytest.raises(ValueError, match="bad PromQL range"):
        get_driver("sim").metrics.expert_load("20 s")
    for kind in ("vllm", "vllm-ascend", "sglang-semipd", "mindie"):
        assert get_driver(kind).metrics.expert_load("1m") is None, kind


def test_only_the_simulator_takes_maps_through_its_agent() -> None:
    pushable = {k.value for k, c in CAPABILITIES.items() if c.supports_expert_rebalance}
    assert pushable == {"sim", "vllm", "vllm-ascend"}
    assert {k for k, d in AGENT_DRIVERS.items() if d.supports_expert_rebalance} == {"sim"}
    assert not any(c.reads_expert_map_at_startup for c in CAPABILITIES.values())
