"""The pod wrapper contract around any engine: the agent zipapp, its flags, volumes, port and probe.

An init container builds the agent zipapp into the shared `/semipd` emptyDir; the engine
container runs `python3 /semipd/agent.pyz --driver <kind> [agent flags] -- <engine command>`.
The agent's admin API has its own port; its bearer token is a Secret mounted read-only.
"""

from __future__ import annotations

from typing import Any

from semipd.engines import k8s
from semipd.engines.base import AGENT_DIR, AGENT_PYZ, AGENT_RUN_DIR, AGENT_VOLUME, EngineContext, EngineDriver

TOKEN_VOLUME = "semipd-agent-token"
TOKEN_DIR = "/var/run/semipd"
TOKEN_KEY = "token"
TOKEN_FILE = f"{TOKEN_DIR}/{TOKEN_KEY}"
INIT_CONTAINER = "semipd-agent-install"


def agent_args(driver: EngineDriver, ctx: EngineContext) -> list[str]:
    """Agent flags (see `semipd-agent --help`); the split flags only for engines that have a split."""
    args = [
        "--driver", driver.kind,
        "--admin-port", str(ctx.engine.ports.admin),
        "--token-file", TOKEN_FILE,
        "--run-dir", AGENT_RUN_DIR,
        "--mps", "auto" if driver.needs_mps else "off",
    ]  # fmt: skip
    if driver.capabilities.supports_split:
        semi = ctx.spec.semi_pd
        args += [
            "--prefill-percent", str(semi.initial_prefill_percent),
            "--decode-percent", str(semi.initial_decode_percent),
            "--prefill-min", str(semi.min_prefill_percent),
            "--prefill-max", str(semi.max_prefill_percent),
            "--decode-min", str(semi.min_decode_percent),
            "--decode-max", str(semi.max_decode_percent),
        ]  # fmt: skip
    return args


def wrapped_command(driver: EngineDriver, ctx: EngineContext) -> list[str]:
    """The engine container's full command: the agent, then `--`, then the engine's own command."""
    return ["python3", AGENT_PYZ, *agent_args(driver, ctx), "--", *driver.parts(ctx).command]


def agent_init_container(image: str) -> dict[str, Any]:
    """Builds the agent zipapp (stdlib only) from the operator image into the shared volume."""
    return {
        "name": INIT_CONTAINER,
        "image": image,
        "command": ["python3", "-m", "semipd.agent.build", AGENT_PYZ],
        "volumeMounts": [k8s.mount(AGENT_VOLUME, AGENT_DIR)],
    }


def agent_volumes(token_secret: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(pod volumes, engine-container mounts) for the agent."""
    volumes = [k8s.empty_dir(AGENT_VOLUME), k8s.secret_volume(TOKEN_VOLUME, token_secret)]
    mounts = [k8s.mount(AGENT_VOLUME, AGENT_DIR), k8s.mount(TOKEN_VOLUME, TOKEN_DIR, read_only=True)]
    return volumes, mounts


def agent_port(ctx: EngineContext) -> dict[str, Any]:
    return k8s.container_port("admin", ctx.engine.ports.admin)


def agent_liveness_probe(ctx: EngineContext) -> dict[str, Any]:
    """The agent exits with the engine, so its /healthz (no token needed) is the container's liveness."""
    return k8s.http_probe("/healthz", ctx.engine.ports.admin, period=10, failure_threshold=3)
