"""The load generator against a real local pod (agent + simulated engine processes on 127.x.y.z).

Checks that prompt lengths reach the engine exactly, both as text and as the extension field, and
that streams are complete.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from semipd.load import SLO, LoadConfig, run_load
from semipd.sim.engine.localpod import LocalPod, PodSet
from semipd.traces import TraceRequest


@pytest.fixture
def pod(tmp_path: Path) -> Iterator[LocalPod]:
    with PodSet(tmp_path) as pods:
        p = pods.make()
        yield p


def prompt_tokens_total(pod: LocalPod) -> float:
    text = pod.engine_metrics_text()
    values = [float(m.group(1)) for m in re.finditer(r"^sglang:prompt_tokens_total\{[^}]*\} (\S+)$", text, re.M)]
    return sum(values)


SCHEDULE = [TraceRequest(i * 0.02, n, 6) for i, n in enumerate((37, 512, 1300, 90, 2048, 7))]


@pytest.mark.parametrize(("mode", "field"), [("full", "x_unread_field"), ("stub", "prompt_tokens")])
async def test_prompt_lengths_reach_the_simulated_engine(pod: LocalPod, mode: str, field: str) -> None:
    cfg = LoadConfig(
        endpoints=(pod.engine_url,),
        model="llama-3-8b",
        prompt_text=mode,  # type: ignore[arg-type]
        prompt_tokens_field=field,
        request_timeout_s=60.0,
    )
    res = await run_load(SCHEDULE, cfg)
    assert [r.status for r in res.results] == ["ok"] * len(SCHEDULE), [r.error for r in res.results]
    assert all(r.output_tokens == 6 for r in res.results)
    assert all(len(r.itl_s) == 5 for r in res.results)
    assert prompt_tokens_total(pod) == sum(r.input_tokens for r in SCHEDULE)
    s = res.summary(SLO(ttft_s=30.0, itl_s=5.0))
    assert s.slo_attainment == 1.0
