"""The vllm driver's KV-cache sizing and its refusal of flags that move the histogram buckets."""

from __future__ import annotations

import pytest

from semipd.engines import DriverError, get_driver
from tests.engines.test_engine_drivers import ctx_of, pool_spec

POOL = {"name": "pool", "accelerator": "nvidia", "acceleratorsPerReplica": 2}


def command(**extra: object) -> list[str]:
    return get_driver("vllm").parts(ctx_of(pool_spec("vllm", **extra))).command


def test_an_explicit_kv_size_replaces_the_memory_fraction() -> None:
    cmd = command(nodePools=[{**POOL, "kvCacheTokens": 4096}])
    assert "--gpu-memory-utilization" not in cmd
    # llama-3-8b: 128 KiB of KV per token, half of it on each of the 2 TP ranks.
    assert cmd[cmd.index("--kv-cache-memory-bytes") + 1] == str(4096 * 65536)


def test_without_a_size_the_gpu_default_applies() -> None:
    cmd = command()
    assert cmd[cmd.index("--gpu-memory-utilization") + 1] == "0.9"
    assert "--kv-cache-memory-bytes" not in cmd


@pytest.mark.parametrize("flag", ["--kv-cache-memory-bytes", "--gpu-memory-utilization", "--num-gpu-blocks-override"])
def test_a_user_memory_flag_replaces_the_drivers(flag: str) -> None:
    cmd = command(engine={"args": [flag, "7"]}, nodePools=[{**POOL, "kvCacheTokens": 4096}])
    sizing = [
        a for a in cmd if a in ("--kv-cache-memory-bytes", "--gpu-memory-utilization", "--num-gpu-blocks-override")
    ]
    assert sizing == [flag]


def test_kv_tokens_without_a_profile_is_refused_with_the_fix() -> None:
    with pytest.raises(DriverError, match=r"model\.profile"):
        command(model={"profile": None}, nodePools=[{**POOL, "kvCacheTokens": 4096}])


def test_custom_histogram_buckets_are_refused() -> None:
    with pytest.raises(DriverError, match="--custom-histogram-buckets"):
        command(engine={"args": ["--custom-histogram-buckets", '{"time_to_first_token": [0.1, 1]}']})
