"""Session fixture `cluster`: the real local control plane (started here, or reused).

Environment knobs: SEMIPD_RUN_DIR (run directory), SEMIPD_E2E_FRESH=1 (never reuse a running
cluster), SEMIPD_E2E_KEEP=1 (leave a cluster this session started running afterwards),
SEMIPD_E2E_DOWN=1 (stop the cluster afterwards even if it was reused).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from e2e.harness import Cluster


def _flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0", "false", "no")


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    reused = c.up(reuse=not _flag("SEMIPD_E2E_FRESH"))
    yield c
    if (not reused and not _flag("SEMIPD_E2E_KEEP")) or _flag("SEMIPD_E2E_DOWN"):
        c.down()


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (deletion is not awaited)."""
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    cluster.ensure_namespace(name)
    yield name
    cluster.core().delete_namespace(name)
