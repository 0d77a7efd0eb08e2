"""The `sglang` (upstream PD-Multiplexing) driver: its command against SGLang 0.5.23's own ServerArgs
parser, its SM-group file against SGLang's own loader, its metric names and buckets against the
package's metrics collector, and the split -> SM-group mapping.

SGLang's parser imports without a GPU once its top-level package (which loads the GPU runtime) is
bypassed: tests/engines/sglang_parse_args.py runs it with the vLLM CPU venv's torch and the sources
`make engines` unpacks (no SGLang install). What needs a GPU (the green-context streams themselves)
is not run here.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from e2e.harness.realengine import require_sglang_sources
from semipd.agent import pdmux
from semipd.agent.drivers import DRIVERS as AGENT_DRIVERS
from semipd.agent.split import Split
from semipd.engines import DriverError, SwitchMode, get_driver
from semipd.engines.sglang_pdmux import SGLANG_05_METRICS
from tests.engines.test_engine_drivers import ctx_of, pool_spec

PARSE_SCRIPT = Path(__file__).with_name("sglang_parse_args.py")
H200 = {"nvidia.com/gpu.product": "NVIDIA-H200"}


def spec_on(selector: dict[str, str], **pool: Any) -> Any:
    node_pool = {"name": "pool", "accelerator": "nvidia", "acceleratorsPerReplica": 2, "nodeSelector": selector}
    return pool_spec("sglang", nodePools=[{**node_pool, **pool}])


def launched(spec: Any, split: Split) -> tuple[list[str], str]:
    """The argv and config file the agent starts the engine with, from the driver's pod parts."""
    parts = get_driver("sglang").parts(ctx_of(spec))
    env = {e["name"]: e["value"] for e in parts.env if "value" in e}
    launch = AGENT_DRIVERS["sglang"].engine_launch(parts.command, split, "/semipd/run", env)
    ((path, content),) = launch.files
    assert launch.argv[-2:] == ("--pdmux-config-path", path)
    return [a.replace("$(POD_IP)", "127.0.0.7") for a in launch.argv], content


def sglang_run(argvs: list[list[str]], configs: list[str]) -> dict[str, list[dict[str, Any]]]:
    python, sources = require_sglang_sources()
    env = {**os.environ, "PYTHONPATH": str(sources)}
    request = json.dumps({"argvs": argvs, "configs": configs})
    out = subprocess.run(
        [str(python), str(PARSE_SCRIPT), request], capture_output=True, text=True, timeout=300, env=env
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result: dict[str, list[dict[str, Any]]] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def parsed() -> dict[str, list[dict[str, Any]]]:
    argv, config = launched(spec_on(H200, kvCacheTokens=200000), Split(60, 100))
    a100_argv, a100_config = launched(spec_on({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}), Split(90, 30))
    return sglang_run([argv, a100_argv, [*argv, "--no-such-flag"]], [config, a100_config, "sm_group_num: 2\n"])


def test_sglang_accepts_the_generated_command(parsed: dict[str, list[dict[str, Any]]]) -> None:
    args = parsed["argvs"][0]
    assert args["model_path"] == "/models/models/llama-3-8b"
    assert args["served_model_name"] == "llama-8b"
    assert (args["host"], args["port"], args["tp_size"], args["context_length"]) == ("127.0.0.7", 8000, 2, 8192)
    assert args["max_total_tokens"] == 200000
    assert args["enable_metrics"] is True
    assert args["pdmux_config_path"] == "/semipd/run/pdmux.yaml"
    # What SGLang 0.5.23's validation_hook asserts when enable_pdmux is set.
    assert args["enable_pdmux"] is True
    assert args["pp_size"] == 1
    assert args["chunked_prefill_size"] == -1
    assert args["disaggregation_mode"] == "null"
    assert args["disable_overlap_schedule"] is True
    assert "error" not in parsed["argvs"][1]
    assert "unrecognized arguments: --no-such-flag" in parsed["argvs"][2]["error"]


def test_sglang_loads_the_sm_group_file(parsed: dict[str, list[dict[str, Any]]]) -> None:
    h200, a100, bad = parsed["configs"]
    # H200: 132 SMs, Hopper steps of 8; 60 / (60 + 100) of 132 = 49.5 -> 48 prefill SMs.
    assert h200 == {
        "sm_group_num": 3,
        "manual_divisions": [[48, 84, 0]],
        "split_forward_token_budget": 65536,
        "decode_bs_divisor": 36,
    }
    # A100: 108 SMs, Ampere steps of 2; 90 / 120 of 108 = 81 SMs = 40.5 steps, rounded half to even: 80.
    assert a100["manual_divisions"] == [[80, 28, 0]]
    assert bad == {"error": "sm_group_num must be >= 3"}


@pytest.mark.parametrize(
    ("split", "sms", "cc", "expected"),
    [
        (Split(50, 50), 132, (9, 0), (64, 68)),
        (Split(100, 1), 132, (9, 0), (120, 12)),  # capped: decode keeps at least the minimum part
        (Split(1, 100), 132, (9, 0), (8, 124)),
        (Split(30, 100), 78, (9, 0), (16, 62)),  # H20
        (Split(1, 100), 108, (8, 0), (4, 104)),
    ],
)
def test_split_maps_to_sm_groups(split: Split, sms: int, cc: tuple[int, int], expected: tuple[int, int]) -> None:
    division = pdmux.sm_division(split, sms, cc)
    assert (division.prefill_sm, division.decode_sm) == expected
    assert division.prefill_sm + division.decode_sm == sms


def test_more_prefill_share_never_means_fewer_prefill_sms() -> None:
    got = [pdmux.sm_division(Split(p, 100), 132, (9, 0)).prefill_sm for p in range(1, 101)]
    assert got == sorted(got)
    assert got[0] < got[-1]


def test_blackwell_is_refused_with_a_clear_error() -> None:
    with pytest.raises(pdmux.PdmuxError, match=r"compute capability 10\.0"):
        pdmux.sm_division(Split(50, 50), 148, (10, 0))


def test_the_driver_refuses_what_pdmux_forbids_or_owns() -> None:
    for args in (["--chunked-prefill-size", "8192"], ["--pp-size", "2"], ["--pdmux-config-path", "/x.yaml"]):
        with pytest.raises(DriverError, match=args[0]):
            get_driver("sglang").parts(ctx_of(pool_spec("sglang", engine={"args": args})))
    with pytest.raises(DriverError, match="bucket edges"):
        get_driver("sglang").parts(ctx_of(pool_spec("sglang", engine={"args": ["--bucket-time-to-first-token", "1"]})))
    with pytest.raises(DriverError, match="ascend"):
        get_driver("sglang").parts(ctx_of(pool_spec("sglang", "ascend")))


def test_env_carries_the_gpu_facts_and_the_agent_checks_the_command() -> None:
    parts = get_driver("sglang").parts(ctx_of(spec_on(H200)))
    env = {e["name"]: e.get("value") for e in parts.env}
    assert env[pdmux.SM_COUNT_ENV] == "132"
    assert env[pdmux.COMPUTE_CAPABILITY_ENV] == "9.0"
    agent = AGENT_DRIVERS["sglang"]
    assert agent.check_command(parts.command, "/semipd/run") == []
    assert agent.check_command(["python3", "-m", "sglang.launch_server"], "/semipd/run") == [
        "the sglang engine command must pass --enable-pdmux: the split is PD-Multiplexing's"
    ]
    with pytest.raises(pdmux.PdmuxError, match=pdmux.SM_COUNT_ENV):
        agent.engine_launch(parts.command, Split(50, 50), "/semipd/run", {})


def test_capabilities_say_restart() -> None:
    driver = get_driver("sglang")
    assert driver.capabilities.switch_mode == SwitchMode.RESTART
    assert AGENT_DRIVERS["sglang"].switch_mode == "restart"
    assert not driver.needs_mps


def _default_buckets(source: str, name: str) -> tuple[float, ...]:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return tuple(float(x) for x in ast.literal_eval(node.value))
    raise AssertionError(f"no default for {name}")


def test_metric_names_and_buckets_are_sglangs() -> None:
    _, sources = require_sglang_sources()
    collector = (sources / "sglang" / "srt" / "observability" / "metrics_collector.py").read_text()
    m = SGLANG_05_METRICS
    for hist in (m.ttft, m.itl, m.e2e):
        assert f'name="{hist}"' in collector
    for gauge in (m.running, m.waiting, m.kv_usage):
        assert f'name="{gauge}"' in collector
    for counter in (m.prompt_tokens, m.generation_tokens, *m.extra.values()):
        assert f'name="{counter}"' in collector, counter
    assert _default_buckets(collector, "bucket_time_to_first_token") == m.ttft_buckets
    assert _default_buckets(collector, "bucket_inter_token_latency") == m.itl_buckets
    assert _default_buckets(collector, "bucket_e2e_request_latency") == m.e2e_buckets
