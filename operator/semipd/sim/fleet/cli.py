"""`semipd simulate`: what-if replay of a trace through an InferencePool's fleet with the real policy.

Prints SLO attainment, latency percentiles, accelerator-hours and the decisions taken; --plot draws
latency percentiles, splits and replicas over time; --json writes the whole result.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from semipd.api.durations import format_seconds
from semipd.api.semantics import parse_spec
from semipd.api.v1alpha1 import AutoscalingMode, InferencePoolSpec
from semipd.cliargs import STDOUT, Parser, duration, fail, positive_duration, write_output
from semipd.data import DEFAULT_POOL_FILE, default_pool
from semipd.perf import ContentionModel, load_contention
from semipd.sim.fleet.controller import Controller, StaticController
from semipd.sim.fleet.fleet import simulate
from semipd.sim.fleet.policy import PolicyController
from semipd.sim.fleet.results import RunResult
from semipd.sim.fleet.router import RouterConfig, RouterKind
from semipd.sim.fleet.setup import fleet_from_spec
from semipd.sim.fleet.truth import Truth, with_truth
from semipd.traces import TraceFormatError, mean_rate, prepare


def build_parser(prog: str = "semipd simulate") -> argparse.ArgumentParser:
    p = Parser(prog=prog, description=__doc__.splitlines()[0])
    p.add_argument(
        "--pool",
        default=None,
        help="InferencePool manifest (YAML); the first InferencePool is used "
        "(default: the packaged copy of examples/sim-mixed-gpu-ascend.yaml)",
    )
    p.add_argument("--trace", required=True, help="azure-conv | azure-code | mooncake, or a .csv/.jsonl path")
    rate = p.add_mutually_exclusive_group()
    rate.add_argument("--rate-scale", type=float, default=None, help="replay X times faster than the trace")
    rate.add_argument("--rate", type=float, default=None, help="replay at this mean rate (req/s)")
    p.add_argument(
        "--duration", type=positive_duration, help="only the first part of the trace, e.g. 5m (after scaling)"
    )
    p.add_argument("--max-requests", type=int, default=None, help="only the first N requests (default: all)")
    p.add_argument("--replicas", action="append", default=[], metavar="POOL=N", help="initial replicas")
    p.add_argument("--capacity", action="append", default=[], metavar="POOL=N",
                   help="replicas the node pool has room for (more stay unschedulable)")  # fmt: skip
    p.add_argument(
        "--startup-s", type=duration, default=None, help="pod start-up delay, e.g. 90s (default: model-derived)"
    )
    p.add_argument("--controller", choices=("policy", "off"), default="policy",
                   help="policy: the shipped planner at spec.autoscaling (default); off: nothing changes")  # fmt: skip
    p.add_argument("--router", choices=("auto", "least-outstanding", "prefix-aware"), default="auto",
                   help="request routing; auto: prefix-aware when the trace has prefix hashes")  # fmt: skip
    world = p.add_mutually_exclusive_group()
    world.add_argument("--contention", default="0.6,0.2,0.2", metavar="K_P,K_D,EPS",
                       help="the simulated world's contention: share-curve k_p,k_d,interference (default: "
                            "the sourced 0.6,0.2,0.2) or take-turns (legacy); the prior is unchanged")  # fmt: skip
    world.add_argument("--contention-file", default=None,
                       help="the world's contention from the GPU harness's JSON (semipd.io/contention/v1)")  # fmt: skip
    p.add_argument("--truth-perturb", default="1,1", metavar="PREFILL,DECODE",
                   help="the world's prefill and decode time scales vs the policy's prior, e.g. 1.3,0.7")  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="random seed of the simulation")
    p.add_argument("--decisions", type=int, default=20, help="decisions to print (0: none, -1: all)")
    p.add_argument("--plot", default=None, help="PNG: latency percentiles, splits and replicas (needs matplotlib)")
    p.add_argument("--json", default=None, help="write the full result (summary, decisions, timeline); - for stdout")
    return p


def _pairs(items: Sequence[str], flag: str, spec: InferencePoolSpec) -> dict[str, int]:
    known = [p.name for p in spec.node_pools]
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not value.isdigit():
            raise ValueError(f"{flag} wants POOL=N, got {item!r}")
        if name not in known:
            raise ValueError(
                f"{flag} {item!r}: the InferencePool has no node pool {name!r} (it has {', '.join(known)})"
            )
        out[name] = int(value)
    return out


def _check_plot_dependency() -> None:
    """--plot needs matplotlib: refuse before simulating, not after."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ValueError("--plot needs matplotlib: pip install 'semipd-operator[bench]' or drop --plot") from None


def load_spec(path: str | None) -> tuple[str, InferencePoolSpec]:
    text = default_pool().read_text() if path is None else Path(path).read_text()
    path = path or DEFAULT_POOL_FILE
    for doc in yaml.safe_load_all(text):
        if doc and doc.get("kind") == "InferencePool":
            spec, problems = parse_spec(doc.get("spec") or {})
            if problems or spec is None:
                raise ValueError(f"{path}: invalid InferencePool: " + "; ".join(str(p) for p in problems))
            return str((doc.get("metadata") or {}).get("name", "pool")), spec
    raise ValueError(f"{path}: no InferencePool document")


def _fmt(v: float) -> str:
    return "-" if v != v else format_seconds(v)


def report(result: RunResult, decisions: int) -> str:
    lines = []
    lost = ", ".join(f"{k} {v}" for k, v in sorted(result.lost.items())) or "none"
    lines.append(
        f"SLO attainment {result.slo_attainment:.2%} (TTFT + window p99 ITL; {result.itl_windows_met:.0%} of "
        f"windows met the ITL); paper's attainment {result.attainment:.2%} (TTFT {result.ttft_attainment:.2%}, "
        f"mean TPOT {result.tpot_attainment:.2%}) of {result.arrivals} requests; lost: {lost}"
    )
    lines.append(
        f"TTFT p50 {_fmt(result.ttft_p50)} p99 {_fmt(result.ttft_p99)} (SLO {_fmt(result.ttft_slo_s)}); "
        f"TPOT p50 {_fmt(result.tpot_p50)} p99 {_fmt(result.tpot_p99)}; token ITL p99 {_fmt(result.itl_p99)} "
        f"(SLO {_fmt(result.itl_slo_s)})"
    )
    per_pool = ", ".join(
        f"{name} {p['accelerator_hours']:.2f} (peak {p['peak_replicas']} x {p['accelerators_per_replica']} "
        f"{p['hardware']})"
        for name, p in result.pools.items()
    )
    lines.append(f"accelerator-hours {result.accelerator_hours:.2f} [{per_pool}]; cost {result.cost:.2f}")
    summary = result.summary()
    lines.append(f"decisions: {summary['split_changes']} split changes completed, "
                 f"{summary['replica_changes']} replica changes")  # fmt: skip
    shown = [a for a in result.actions if a.action not in ("SetSplit", "SetReplicas", "SplitDone") or a.error]
    if decisions >= 0:
        shown = shown[:decisions]
    for a in shown:
        err = f"  REFUSED: {a.error}" if a.error else ""
        lines.append(f"  t={a.time:8.1f}s {a.action:<12} {a.target:<14} {a.reason:<16} {a.value}{err}")
    lines.append(f"simulated {result.duration_s:.0f}s in {result.wall_s:.1f}s wall ({result.events} events)")
    return "\n".join(lines)


def main(argv: list[str] | None = None, prog: str = "semipd simulate") -> int:
    args = build_parser(prog).parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.plot:
            _check_plot_dependency()
        if args.plot == STDOUT and args.json == STDOUT:
            raise ValueError("--plot - and --json - would share standard output; give one a file")
        name, spec = load_spec(args.pool)
        replicas = _pairs(args.replicas, "--replicas", spec)
        capacity = _pairs(args.capacity, "--capacity", spec)
        if args.contention_file:
            world = load_contention(args.contention_file)
        else:
            world = ContentionModel.parse(args.contention)
        truth = Truth.parse_perturb(args.truth_perturb, world)
        trace = prepare(
            args.trace,
            context_length=spec.model.max_context_length,
            rate=args.rate,
            rate_scale=args.rate_scale,
            duration_s=args.duration,
            max_requests=args.max_requests,
        )
    except (OSError, ValueError, TraceFormatError) as e:
        return fail(prog, e)
    if not trace:
        return fail(prog, "the trace selection is empty (check --duration, --max-requests)")
    # With `--json -` or `--plot -` standard output carries that alone; the report goes to stderr.
    out = sys.stderr if STDOUT in (args.json, args.plot) else sys.stdout
    prefix = any(r.hash_ids for r in trace)
    router_kind = {
        "auto": RouterKind.PREFIX_AWARE if prefix else RouterKind.LEAST_OUTSTANDING,
        "least-outstanding": RouterKind.LEAST_OUTSTANDING,
        "prefix-aware": RouterKind.PREFIX_AWARE,
    }[args.router]
    setup = fleet_from_spec(spec, replicas=replicas, capacity=capacity, startup_s=args.startup_s,
                            seed=args.seed, prefix_cache=prefix, router=RouterConfig(kind=router_kind))  # fmt: skip
    setup = with_truth(setup, truth)
    controller: Controller
    if args.controller == "off" or spec.autoscaling.mode == AutoscalingMode.OFF:
        controller = StaticController("off")
    else:
        controller = PolicyController(spec, name=f"policy-{spec.autoscaling.mode.value}")
    pools = "; ".join(
        f"{p.name}: {p.kind} {p.model.model.name} on {p.accelerators_per_replica}x {p.model.hardware.name}, "
        f"{p.replicas} replicas ({p.min_replicas}-{p.max_replicas}), start-up {p.startup_s:.0f}s"
        for p in setup.pools
    )
    print(f"InferencePool {name}: {pools}", file=out)
    print(f"simulated world: {truth.label()} (the policy plans with its prior)", file=out)
    print(f"trace {args.trace}: {len(trace)} requests over {trace[-1].arrival_s:.0f}s "
          f"({mean_rate(trace):.2f} req/s), router {router_kind.value}, controller {controller.name}",
          file=out)  # fmt: skip
    result = simulate(setup, trace, controller, name=name)
    print(report(result, args.decisions), file=out)
    if args.json:
        write_output(args.json, json.dumps(result.to_json(), indent=1))
    if args.plot:
        from semipd.sim.fleet.plot import plot_timeline

        title = f"{name} / {args.trace}: attainment {result.attainment:.1%}"
        plot_timeline(result, sys.stdout.buffer if args.plot == STDOUT else args.plot, title)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
