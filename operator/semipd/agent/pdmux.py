"""Upstream SGLang PD-Multiplexing: a prefill/decode split as the engine's green-context SM groups.

SGLang 0.5 (`--enable-pdmux`, sglang/srt/multiplex/pdmux_context.py) builds its stream groups once, at
scheduler start, from a YAML file (`--pdmux-config-path`): group 0 gives prefill every SM, the last
group gives decode every SM, and the `sm_group_num - 2` groups between are `manual_divisions`
entries `[prefill_sm, decode_sm, decode_bs_threshold]`; while both phases run, the scheduler picks
the last entry whose threshold the decode batch size reaches. Green contexts partition SMs
disjointly, so a split (p, d) in MPS percentages (which may sum past 100) becomes one middle group
with p / (p + d) of the SMs for prefill, rounded to the architecture's green-context step. A new
split needs a new file and a restart: the groups are never rebuilt while the engine runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from semipd.agent.split import Split

SM_COUNT_ENV = "SEMIPD_SM_COUNT"
"""SMs of one GPU, set by the operator's driver from the node pool's hardware profile."""
COMPUTE_CAPABILITY_ENV = "SEMIPD_COMPUTE_CAPABILITY"
"""`major.minor` of that GPU, which decides the green-context granularity."""
CONFIG_FILE = "pdmux.yaml"
"""Written by the agent into its run dir before each engine start."""

# pdmux_context.get_arch_constraints: compute-capability major -> (min SMs per part, SM step).
# Anything else (Blackwell, major 10) raises there: support is pending upstream (sglang #32931).
ARCH_CONSTRAINTS: dict[int, tuple[int, int]] = {6: (1, 1), 7: (2, 2), 8: (4, 2), 9: (8, 8)}
SPLIT_FORWARD_TOKEN_BUDGET = 65536
DECODE_BS_DIVISOR = 36
"""PDMuxConfig defaults in SGLang 0.5.23; written out so the file states every value the engine uses."""


class PdmuxError(ValueError):
    """The GPU or the split cannot be expressed as SGLang green-context SM groups."""


@dataclass(frozen=True)
class SmDivision:
    """SMs given to prefill and to decode while both run."""

    prefill_sm: int
    decode_sm: int


def parse_compute_capability(text: str) -> tuple[int, int]:
    major, _, minor = text.strip().partition(".")
    try:
        return int(major), int(minor or 0)
    except ValueError:
        raise PdmuxError(f"compute capability {text!r} is not of the form major.minor") from None


def sm_division(split: Split, total_sms: int, compute_capability: tuple[int, int]) -> SmDivision:
    """The middle SM group for `split` on one GPU."""
    constraint = ARCH_CONSTRAINTS.get(compute_capability[0])
    if constraint is None:
        major, minor = compute_capability
        raise PdmuxError(
            f"SGLang PD-Multiplexing has no green-context SM constraints for compute capability {major}.{minor} "
            f"(supported majors: {sorted(ARCH_CONSTRAINTS)})"
        )
    min_part, step = constraint
    if total_sms < 2 * min_part:
        raise PdmuxError(f"{total_sms} SMs cannot hold two green-context parts of at least {min_part} SMs")
    share = split.prefill_percent / (split.prefill_percent + split.decode_percent)
    prefill = round(total_sms * share / step) * step
    highest = (total_sms - min_part) // step * step
    lowest = -(-min_part // step) * step
    prefill = max(lowest, min(highest, prefill))
    return SmDivision(prefill, total_sms - prefill)


def config_yaml(division: SmDivision) -> str:
    """The `--pdmux-config-path` file: one middle group used whenever both phases run (threshold 0)."""
    return (
        "# written by semipd-agent from the operator's prefill/decode split\n"
        "sm_group_num: 3\n"
        f"manual_divisions:\n  - [{division.prefill_sm}, {division.decode_sm}, 0]\n"
        f"split_forward_token_budget: {SPLIT_FORWARD_TOKEN_BUDGET}\n"
        f"decode_bs_divisor: {DECODE_BS_DIVISOR}\n"
    )
