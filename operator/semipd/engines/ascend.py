"""Host paths an Ascend NPU container needs besides the devices the Ascend device plugin injects.

With Ascend Docker Runtime the runtime injects these itself (EngineContext.ascend_runtime_injects_mounts).
`/etc/hccn.conf` is only needed for multi-node and the KV pool, which these drivers do not set up.
"""

from __future__ import annotations

from typing import Any

from semipd.engines import k8s
from semipd.engines.base import EngineContext

ASCEND_HOST_PATHS: tuple[tuple[str, str, str], ...] = (
    ("ascend-driver-lib64", "/usr/local/Ascend/driver/lib64", "Directory"),
    ("ascend-driver-version", "/usr/local/Ascend/driver/version.info", "File"),
    ("ascend-install-info", "/etc/ascend_install.info", "File"),
    ("ascend-dcmi", "/usr/local/dcmi", "Directory"),
    ("ascend-npu-smi", "/usr/local/bin/npu-smi", "File"),
)


def ascend_volumes(ctx: EngineContext) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    if ctx.ascend_runtime_injects_mounts:
        return [], []
    volumes = [k8s.host_path(name, path, kind) for name, path, kind in ASCEND_HOST_PATHS]
    mounts = [k8s.mount(name, path, read_only=True) for name, path, _ in ASCEND_HOST_PATHS]
    return volumes, mounts
