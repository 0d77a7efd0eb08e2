"""The GPU calibration harness end to end on the CPU with tiny shapes (needs torch; no GPU).

`make unit` installs torch (CPU use of the PyPI wheel) and sets SEMIPD_REQUIRE_TORCH=1, so there a
missing torch fails these tests instead of skipping them.
"""

from __future__ import annotations

import json
import math
import os

import pytest

if os.environ.get("SEMIPD_REQUIRE_TORCH") == "1":
    import torch
else:
    torch = pytest.importorskip("torch", reason="torch not installed; `make unit` installs it")

from bench.gpu import calibrate, partition, timing
from bench.gpu.fit import SCHEMA
from bench.gpu.workload import DecodeConfig, LayerShape, PrefillConfig, Steps
from semipd.perf.profiles import MODELS


def test_layer_shapes_come_from_the_models_profiles():
    llama, qwen = LayerShape.of("llama-3-8b"), LayerShape.of("qwen3-32b")
    assert (llama.hidden, llama.q_heads, llama.kv_heads, llama.ffn, llama.head_dim) == (4096, 32, 8, 14336, 128)
    assert (qwen.hidden, qwen.q_heads, qwen.kv_heads, qwen.ffn, qwen.head_dim) == (5120, 64, 8, 25600, 128)
    # One layer's weights times the layer count is the model's parameters less embeddings and LM head.
    m = MODELS["llama-3-8b"]
    assert llama.params * m.layers == pytest.approx(m.params - 2 * m.vocab * m.hidden, rel=0.01)
    assert llama.kv_bytes_per_token(2) * m.layers == m.kv_bytes_per_token
    with pytest.raises(ValueError, match="dense GQA"):
        LayerShape.of("deepseek-v3")


def test_prefill_and_decode_steps_run_and_keep_the_hidden_shape():
    shape = calibrate.tiny_shape("qwen3-32b")
    steps = Steps(shape, layers=2, device=torch.device("cpu"), dtype=torch.float32)
    out = steps.prefill_step(PrefillConfig(sequences=2, tokens=8))()
    assert out.shape == (16, shape.hidden)
    assert torch.isfinite(out).all()
    decode = steps.decode_step(DecodeConfig(batch=3, context=5))
    assert decode().shape == (3, shape.hidden)


def test_cpu_corun_keeps_the_background_busy_throughout():
    lanes = partition.Cpu().split(50)
    busy = timing.prepare(lambda: torch.ones(64, 64) @ torch.ones(64, 64), lanes[1], use_graph=False)
    meas = timing.prepare(lambda: torch.ones(32, 32) @ torch.ones(32, 32), lanes[0], use_graph=False)
    r = timing.corun(meas, busy, reps=5, ratio=1.0)
    assert len(r.latencies) == 5
    assert r.covered
    assert r.background_runs >= 1


def test_cpu_corun_surfaces_a_failing_background():
    lanes = partition.Cpu().split(50)
    meas = timing.prepare(lambda: torch.ones(8), lanes[0], use_graph=False)

    def boom() -> torch.Tensor:
        raise RuntimeError("kaput")

    bad = timing.Prepared(lanes[1], boom)
    with pytest.raises(RuntimeError, match="background phase failed"):
        timing.corun(meas, bad, reps=3, ratio=1.0)


def test_green_context_driver_calls_exist_in_cuda_python():
    """The names partition.GreenContexts calls are in the installed cuda-python (checked without a GPU)."""
    try:
        drv = partition._load_driver()
    except ImportError:
        pytest.skip("cuda-python is not installed with this torch")
    for fn in (
        "cuDeviceGet",
        "cuDeviceGetDevResource",
        "cuDevSmResourceSplitByCount",
        "cuDevResourceGenerateDesc",
        "cuGreenCtxCreate",
        "cuGreenCtxStreamCreate",
        "cuGreenCtxDestroy",
        "cuStreamDestroy",
    ):
        assert callable(getattr(drv, fn)), fn
    assert drv.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM is not None
    assert drv.CUgreenCtxCreate_flags.CU_GREEN_CTX_DEFAULT_STREAM is not None
    assert drv.CUstream_flags.CU_STREAM_NON_BLOCKING is not None
    assert drv.CUresult.CUDA_SUCCESS is not None


def test_calibrate_tiny_on_cpu_writes_the_contention_file(tmp_path, capsys):
    out = tmp_path / "results" / "contention-cpu.json"
    assert calibrate.main(["--device", "cpu", "--tiny", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["schema"] == SCHEMA
    assert doc["partitioning"] == "cpu"
    assert doc["hardware"] == "cpu"
    assert doc["device"] == "cpu"
    assert doc["complete"] is True
    assert set(doc["per_model"]) == {"llama-3-8b", "qwen3-32b"}
    for key in ("prefill_k", "decode_k", "interference"):
        assert math.isfinite(doc[key])
    for entry in doc["per_model"].values():
        samples = entry["samples"]
        phases = {(s["phase"], s["other_share"] > 0) for s in samples}
        assert phases == {("prefill", False), ("decode", False), ("prefill", True), ("decode", True)}
        assert all(s["latency_s"] > 0 and s["reps"] >= 3 for s in samples)
        assert entry["prefill_k"] >= 0.0
        assert entry["shape"]["hidden"] in (64, 80)
    assert all(c["covered"] for c in doc["corun"])
    assert "partitioning cpu" in capsys.readouterr().out


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_asking_for_cuda_without_a_gpu_says_so(tmp_path):
    with pytest.raises(SystemExit, match="sees no CUDA device"):
        calibrate.main(["--out", str(tmp_path / "c.json")])
    assert not (tmp_path / "c.json").exists()
