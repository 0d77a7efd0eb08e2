"""The pydantic models: defaults, aliases and the per-pool engine override."""

from __future__ import annotations

from pathlib import Path

import yaml

from semipd.api.v1alpha1 import EngineKind, InferencePool, InferencePoolSpec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(name: str) -> InferencePoolSpec:
    return InferencePool.model_validate(yaml.safe_load((EXAMPLES / name).read_text())).spec


def test_defaults_apply() -> None:
    spec = _load("sim-mixed-gpu-ascend.yaml")
    assert spec.semi_pd.enabled is True
    # prefill set by the example, decode the default
    assert (spec.semi_pd.initial_prefill_percent, spec.semi_pd.initial_decode_percent) == (50, 50)
    assert spec.slo.attainment_target == 0.99
    assert spec.engine.ports.http == 8000
    assert spec.engine.ports.admin == 9090
    assert spec.node_pools[0].effective_resource_name() == "nvidia.com/gpu"
    assert spec.node_pools[1].effective_resource_name() == "huawei.com/Ascend910"


def test_pool_engine_override_replaces_only_set_fields() -> None:
    spec = _load("mixed-gpu-ascend.yaml")
    gpu, ascend = spec.node_pools
    assert spec.effective_engine(gpu).kind == EngineKind.SGLANG_SEMIPD
    assert spec.effective_engine(ascend).kind == EngineKind.VLLM_ASCEND
    assert spec.effective_engine(ascend).args == ["--max-model-len", "131072"]
    assert spec.effective_engine(ascend).ports == spec.engine.ports


def test_wire_names_are_camel_case() -> None:
    spec = _load("moe-gpu.yaml")
    dumped = spec.model_dump(by_alias=True, exclude_none=True)
    assert "semiPD" in dumped
    assert "expertsPerToken" in dumped["model"]
    assert "prometheusURL" not in dumped["autoscaling"]
    assert dumped["placement"]["experts"]["redundantExperts"] == 32
