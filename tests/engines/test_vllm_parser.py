"""The vllm driver's generated commands, parsed by vLLM's own `vllm serve` parser and EngineArgs.

Runs tests/engines/vllm_parse_args.py with the python of the vLLM CPU venv that `make engines`
caches outside the repo (e2e/harness/realengine.py finds it; on CI a missing venv fails).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from e2e.harness.realengine import require_vllm_python
from semipd.engines import get_driver
from tests.engines.test_engine_drivers import ctx_of, pool_spec

PARSE_SCRIPT = Path(__file__).with_name("vllm_parse_args.py")


def vllm_parse(argvs: list[list[str]]) -> list[dict[str, Any]]:
    python = require_vllm_python()
    out = subprocess.run(
        [str(python), str(PARSE_SCRIPT), json.dumps(argvs)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result: list[dict[str, Any]] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def command(spec: Any) -> list[str]:
    argv = get_driver("vllm").parts(ctx_of(spec)).command
    return [a.replace("$(POD_IP)", "127.0.0.7") for a in argv]


@pytest.fixture(scope="module")
def parsed() -> dict[str, dict[str, Any]]:
    specs = {
        "gpu-default": pool_spec("vllm"),
        "kv-tokens": pool_spec(
            "vllm",
            nodePools=[{"name": "pool", "accelerator": "nvidia", "acceleratorsPerReplica": 2, "kvCacheTokens": 4096}],
        ),
        "moe-eplb": pool_spec(
            "vllm",
            model={"architecture": "moe", "experts": 128, "expertsPerToken": 8, "profile": "qwen3-30b-a3b"},
            placement={"experts": {"enabled": True, "redundantExperts": 16}},
        ),
        "user-args": pool_spec(
            "vllm",
            engine={"args": ["--kv-cache-memory-bytes", "4194304", "--enforce-eager", "--max-num-seqs", "4"]},
        ),
    }
    argvs = {name: command(spec) for name, spec in specs.items()}
    probes = {
        "unknown-flag": [*argvs["gpu-default"], "--no-such-flag", "1"],
    }
    names = [*argvs, *probes]
    results = vllm_parse([*argvs.values(), *probes.values()])
    return dict(zip(names, results, strict=True))


def test_every_generated_command_is_accepted_by_vllm(parsed: dict[str, dict[str, Any]]) -> None:
    for name in ("gpu-default", "kv-tokens", "moe-eplb", "user-args"):
        assert "error" not in parsed[name], (name, parsed[name])
        assert parsed[name]["model"] == "/models/models/llama-3-8b" or name == "moe-eplb"
        assert parsed[name]["served_model_name"] == ["llama-8b"]
        assert parsed[name]["host"] == "127.0.0.7"
        assert parsed[name]["port"] == 8000
        assert parsed[name]["tensor_parallel_size"] == 2
        assert parsed[name]["max_model_len"] == 8192


def test_the_parser_rejects_what_vllm_does_not_know(parsed: dict[str, dict[str, Any]]) -> None:
    assert "unrecognized arguments: --no-such-flag" in parsed["unknown-flag"]["error"]


def test_memory_flags_reach_vllm_as_meant(parsed: dict[str, dict[str, Any]]) -> None:
    assert parsed["gpu-default"]["gpu_memory_utilization"] == 0.9
    assert parsed["gpu-default"]["kv_cache_memory_bytes"] is None
    # llama-3-8b: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes = 128 KiB per token, halved by TP 2.
    assert parsed["kv-tokens"]["kv_cache_memory_bytes"] == 4096 * 131072 // 2
    assert parsed["user-args"]["kv_cache_memory_bytes"] == 4194304
    assert parsed["user-args"]["enforce_eager"] is True
    assert parsed["user-args"]["max_num_seqs"] == 4


def test_expert_placement_turns_on_vllm_eplb(parsed: dict[str, dict[str, Any]]) -> None:
    moe = parsed["moe-eplb"]
    assert moe["enable_expert_parallel"] is True
    assert moe["enable_eplb"] is True
    assert "num_redundant_experts=16" in moe["eplb_config"]
