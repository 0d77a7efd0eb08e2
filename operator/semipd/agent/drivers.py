"""Agent-side engine drivers: how each engine kind is launched and how (or whether) its split changes.

Pure launch mechanics only (argv and env for each process); the supervisor runs them. Switch modes:
  standby_swap  a standby prefill worker with the new share attaches to the decode owner and is
                swapped in (simulated engine; Semi-PD DistServe branch layout)
  restart       the split is fixed at launch (Semi-PD `main`: SEMI_PD_*_SM_PERCENTILE env and
                --enable-semi-pd; upstream SGLang PD-Multiplexing: the green-context SM groups of
                its --pdmux-config-path file), so a change relaunches the engine
  none          the engine has no prefill/decode split (vLLM, vllm-ascend, MindIE)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from semipd.agent import pdmux
from semipd.agent.runpaths import RUN_DIR_ENV
from semipd.agent.split import Split

STANDBY_SWAP = "standby_swap"
RESTART = "restart"
NONE = "none"

MPS_PERCENT_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
SEMI_PD_PREFILL_ENV = "SEMI_PD_PREFILL_SM_PERCENTILE"
SEMI_PD_DECODE_ENV = "SEMI_PD_DECODE_SM_PERCENTILE"


@dataclass(frozen=True)
class Launch:
    argv: tuple[str, ...]
    env: dict[str, str]
    files: tuple[tuple[str, str], ...] = ()
    """(path, content) the supervisor writes before starting the process."""


@dataclass(frozen=True)
class HealthEndpoint:
    host: str
    port: int
    path: str


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The value of `--flag V` or `--flag=V` in argv (last one wins, like argparse)."""
    found = None
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            found = argv[i + 1]
        elif arg.startswith(flag + "="):
            found = arg[len(flag) + 1 :]
    return found


def has_flag(argv: Sequence[str], flag: str) -> bool:
    return any(arg == flag or arg.startswith(flag + "=") for arg in argv)


def _with_env(base: Mapping[str, str], run_dir: str, extra: Mapping[str, str]) -> dict[str, str]:
    env = dict(base)
    env[RUN_DIR_ENV] = run_dir
    env.update(extra)
    return env


class Driver:
    kind = ""
    switch_mode = NONE
    needs_mps = False
    default_split = Split(100, 100)
    default_port: int | None = None
    health_path: str | None = None
    unsupported_reason = ""
    supports_expert_rebalance = False
    """The engine loads a new expert map while serving (agent/experts.py forwards `PUT /v1/experts`)."""
    _owned_flags: tuple[str, ...] = ()
    """Engine flags the agent sets itself: a command that also sets them is refused."""

    @property
    def supports_split(self) -> bool:
        return self.switch_mode != NONE

    def check_command(self, argv: Sequence[str], run_dir: str) -> list[str]:
        """Problems that make the engine command unusable with this driver."""
        problems = [] if argv else ["no engine command given after --"]
        return problems + [
            f"{flag} is set by the agent; remove it from the engine command"
            for flag in self._owned_flags
            if has_flag(argv, flag)
        ]

    def engine_launch(self, argv: Sequence[str], split: Split, run_dir: str, base_env: Mapping[str, str]) -> Launch:
        return Launch(tuple(argv), _with_env(base_env, run_dir, {}))

    def prefill_worker_launch(
        self, argv: Sequence[str], worker_id: int, percent: int, run_dir: str, base_env: Mapping[str, str]
    ) -> Launch:
        raise NotImplementedError(f"driver {self.kind} has no separately launched prefill workers")

    def health_endpoint(self, argv: Sequence[str]) -> HealthEndpoint | None:
        if self.default_port is None or self.health_path is None:
            return None
        port = flag_value(argv, "--port")
        host = flag_value(argv, "--host") or "127.0.0.1"
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        return HealthEndpoint(host, int(port) if port else self.default_port, self.health_path)


class SimDriver(Driver):
    """`semipd sim-engine --role decode-owner ...`; prefill workers are extra processes of the same CLI."""

    kind = "sim"
    switch_mode = STANDBY_SWAP
    supports_expert_rebalance = True
    default_split = Split(50, 100)
    default_port = 8000
    health_path = "/health"
    _owned_flags = ("--prefill-percent", "--decode-percent", "--worker-id", "--enable-semi-pd")

    def check_command(self, argv: Sequence[str], run_dir: str) -> list[str]:
        problems = super().check_command(argv, run_dir)
        if argv and flag_value(argv, "--role") != "decode-owner":
            problems.append("the sim engine command must run `--role decode-owner`; the agent starts prefill workers")
        given = flag_value(argv, "--run-dir")
        if given is not None and given.rstrip("/") != run_dir.rstrip("/"):
            problems.append(f"engine --run-dir {given} differs from the agent's --run-dir {run_dir}")
        return problems

    def engine_launch(self, argv: Sequence[str], split: Split, run_dir: str, base_env: Mapping[str, str]) -> Launch:
        share = str(split.decode_percent)
        return Launch(tuple(argv), _with_env(base_env, run_dir, {MPS_PERCENT_ENV: share, SEMI_PD_DECODE_ENV: share}))

    def prefill_worker_launch(
        self, argv: Sequence[str], worker_id: int, percent: int, run_dir: str, base_env: Mapping[str, str]
    ) -> Launch:
        out: list[str] = []
        skip = False
        for i, arg in enumerate(argv):
            if skip:
                skip = False
                continue
            if arg == "--role" and i + 1 < len(argv):
                out += ["--role", "prefill-worker"]
                skip = True
            elif arg.startswith("--role="):
                out.append("--role=prefill-worker")
            else:
                out.append(arg)
        out += ["--worker-id", str(worker_id), "--prefill-percent", str(percent)]
        share = str(percent)
        env = _with_env(base_env, run_dir, {MPS_PERCENT_ENV: share, SEMI_PD_PREFILL_ENV: share})
        return Launch(tuple(out), env)


class SglangSemiPdDriver(Driver):
    """Semi-PD `main` (SGLang fork): the engine starts its own P and D schedulers from env at launch."""

    kind = "sglang-semipd"
    switch_mode = RESTART
    needs_mps = True
    default_split = Split(80, 100)  # the fork's defaults for SEMI_PD_{PREFILL,DECODE}_SM_PERCENTILE
    default_port = 30000
    health_path = "/health"

    def engine_launch(self, argv: Sequence[str], split: Split, run_dir: str, base_env: Mapping[str, str]) -> Launch:
        args = tuple(argv) if has_flag(argv, "--enable-semi-pd") else (*argv, "--enable-semi-pd")
        env = _with_env(
            base_env,
            run_dir,
            {SEMI_PD_PREFILL_ENV: str(split.prefill_percent), SEMI_PD_DECODE_ENV: str(split.decode_percent)},
        )
        return Launch(args, env)


class SimSemiPdDriver(SglangSemiPdDriver):
    """`semipd sim-engine --role decode-owner --enable-semi-pd`: the simulated engine as Semi-PD `main` runs,
    starting its own prefill worker from SEMI_PD_*_SM_PERCENTILE at launch (the same launch), so a change
    is a restart."""

    kind = "sim-semipd"
    needs_mps = False
    default_port = 8000
    _owned_flags = ("--prefill-percent", "--decode-percent", "--worker-id")

    def check_command(self, argv: Sequence[str], run_dir: str) -> list[str]:
        problems = super().check_command(argv, run_dir)
        if argv and flag_value(argv, "--role") != "decode-owner":
            problems.append("the sim-semipd engine command must run `--role decode-owner`")
        return problems


class SglangPdmuxDriver(Driver):
    """Upstream SGLang with `--enable-pdmux`: the split is the SM division of its config file (agent/pdmux.py)."""

    kind = "sglang"
    switch_mode = RESTART
    default_split = Split(50, 50)
    default_port = 30000
    health_path = "/health"
    _owned_flags = ("--pdmux-config-path",)

    def check_command(self, argv: Sequence[str], run_dir: str) -> list[str]:
        problems = super().check_command(argv, run_dir)
        if argv and not has_flag(argv, "--enable-pdmux"):
            problems.append("the sglang engine command must pass --enable-pdmux: the split is PD-Multiplexing's")
        return problems

    def engine_launch(self, argv: Sequence[str], split: Split, run_dir: str, base_env: Mapping[str, str]) -> Launch:
        try:
            total_sms = int(base_env[pdmux.SM_COUNT_ENV])
            capability = pdmux.parse_compute_capability(base_env[pdmux.COMPUTE_CAPABILITY_ENV])
        except (KeyError, ValueError) as e:
            raise pdmux.PdmuxError(
                f"{pdmux.SM_COUNT_ENV} and {pdmux.COMPUTE_CAPABILITY_ENV} must be set for the sglang driver: {e}"
            ) from e
        path = f"{run_dir.rstrip('/')}/{pdmux.CONFIG_FILE}"
        content = pdmux.config_yaml(pdmux.sm_division(split, total_sms, capability))
        return Launch((*argv, "--pdmux-config-path", path), _with_env(base_env, run_dir, {}), ((path, content),))


class UnsupportedSplitDriver(Driver):
    switch_mode = NONE
    default_split = Split(100, 100)

    def __init__(self, kind: str, reason: str, default_port: int | None, health_path: str | None) -> None:
        self.kind = kind
        self.unsupported_reason = reason
        self.default_port = default_port
        self.health_path = health_path


DRIVERS: dict[str, Driver] = {
    d.kind: d
    for d in (
        SimDriver(),
        SimSemiPdDriver(),
        SglangSemiPdDriver(),
        SglangPdmuxDriver(),
        UnsupportedSplitDriver(
            "vllm",
            "vLLM runs prefill and decode in one co-located engine process; it has no separate prefill/decode "
            "compute shares, so a split cannot be set",
            8000,
            "/health",
        ),
        UnsupportedSplitDriver(
            "vllm-ascend",
            "vllm-ascend runs prefill and decode in one engine process; it exposes no per-phase core limit "
            "(torch.npu.set_stream_limit is not wired to a prefill/decode split), so a split cannot be set",
            8000,
            "/health",
        ),
        UnsupportedSplitDriver(
            "mindie",
            "MindIE Service exposes no prefill/decode compute split (its config.json has no per-phase core "
            "share), so a split cannot be set",
            None,
            None,
        ),
    )
}
