"""Fixtures for simulated-engine component tests: real agent + simulated-engine processes on loopback addresses."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from semipd.sim.engine.localpod import LocalPod, PodSet


@pytest.fixture
def pod_factory(tmp_path: Path) -> Iterator[Callable[..., LocalPod]]:
    with PodSet(tmp_path) as pods:
        yield pods.make
