"""Probe harness for controller changes: quick, side-by-side runs of the fair judge's worlds.

The committed benches take 7-30 minutes; tuning the split controller needs answers in seconds to a
few minutes, and needs them for two revisions at once. Each command runs at the working tree and,
with `--rev REV`, also at git revision REV (a temporary worktree), and prints both side by side.

    probe_policy.py sets [std pert eps seeds losses] [--buckets vllm] [--static] [--policy ours-restart]
                                                fixed-budget runs: SLO per run, sum; --static: and
                                                the best static split; --policy: a variant of ours
                                                (every command: --prior k_p,k_d,eps, ours' contention prior)
    probe_policy.py day [--ttft 2,3]            azure-conv day sweep (peaks 11-16): the day criterion
                                                against replica-only refs in results/fleet_cost.json
    probe_policy.py windows TRACE RATE SCALE [POLICY ...]   requests met / arrived per 60 s window
    probe_policy.py decisions TRACE RATE SCALE [--grep PAT] ours' decision log (not per-pod SetSplit)

Sets (each run at the tight and paper ITL): std = the 4 traces at rates around ours' 90 % point (18
runs); pert = prefill/decode time x1.3/x0.7 both ways on azure-conv and mix-shift (20); eps =
interference 0 and 0.5 on azure-conv (8). Simulations only; nothing here is a result to quote:
re-run the committed bench for that.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
SETS: dict[str, list[tuple[Any, ...]]] = {
    "std": [
        (t, r, (1.0, 1.0), 0.2)
        for t, rates in (
            ("azure-conv", (24.0, 28.0)),
            ("azure-code", (3.0, 4.0)),
            ("mooncake", (3.0, 4.0)),
            ("mix-shift", (5.0, 6.0, 7.0)),
        )
        for r in rates
    ],
    "pert": [
        (t, r, truth, 0.2)
        for t, rates in (("azure-conv", (20.0, 24.0)), ("mix-shift", (4.0, 5.0, 6.0)))
        for r in rates
        for truth in ((1.3, 0.7), (0.7, 1.3))
    ],
    "eps": [("azure-conv", r, (1.0, 1.0), e) for e in (0.0, 0.5) for r in (20.0, 24.0)],
    "seeds": [
        ("mix-shift", r, truth, 0.2, seed)
        for truth in ((1.0, 1.0), (0.7, 1.3))
        for r in (4.0, 5.0, 6.0, 7.0)
        for seed in range(5)
    ],
    "losses": [
        (t, r, (1.0, 1.0), 0.2, seed)
        for t, rates in (("azure-code", (3.0, 4.0)), ("mooncake", (3.0, 4.0)), ("mix-shift", (5.0, 6.0)))
        for r in rates
        for seed in range(5)
    ],
}
"""Cases (trace, rate, truth, eps[, seed]). seeds = draws of the mix-shift trace: the standard and the
decode x1.3 world at every committed rate, seeds 0-4 (80 runs, ~3 min): one broken window there moves a
run by ~10 points, so a change is judged on the sum over draws, not one. losses = the traces where ours
trails the best static split at the tight ITL, seeds 0-4 (router ties; mix-shift's draw too): run with
--static to see whether a gap is one draw's luck (~9 min)."""


PRIOR_HELP = "the contention form ours' latency models assume: take-turns (shipped) or k_p,k_d,eps"


def _prior(prior: str) -> dict[str, str]:
    """fa.Run's prior argument, left out at the shipped one (revisions before it had no such field)."""
    return {} if prior == "take-turns" else {"prior": prior}


def _import_tree(tree: Path) -> None:
    """Import the bench and the operator package from `tree` (a worktree for --rev), not this checkout."""
    sys.path[:0] = [str(tree / "bench"), str(tree / "operator")]


def _set_run(
    case: tuple[Any, ...],
    buckets: str = "sglang",
    static: bool = False,
    prior: str = "take-turns",
    policy: str = "ours",
) -> list[tuple[str, float, str, float]]:
    """`policy` (ours, or a variant such as ours-restart) at both ITL scales; with `static`, also the best of
    the fair judge's static splits (name, SLO).
    `case`: (trace, rate, truth, eps) or, in the seeds and losses sets, (trace, rate, truth, eps, seed)."""
    import bench_fleet_attainment as fa

    trace, rate, truth, eps, *seeded = case
    seed = seeded[0] if seeded else 0
    out = []
    for scale in ("tight", "paper"):
        kw = {"eps": eps, "truth": truth, "itl_buckets": buckets, "seed": seed, **_prior(prior)}
        runs = [fa.Run(trace, name, rate, scale, **kw)
                for name in (policy, *(f"static-{x}-{y}" for x, y in fa.STATIC_SPLITS if static))]  # fmt: skip
        scores = {run.policy: float(fa.run_one(run)[0]["slo"]) for run in runs}
        key = f"{trace} {rate:g} {scale} x{truth[0]:g}/{truth[1]:g} eps {eps:g}" + (f" seed {seed}" if seeded else "")
        out.append((key, scores[policy], *best_static(scores)))
    return out


def best_static(scores: dict[str, float]) -> tuple[str, float]:
    """The static split with the highest SLO attainment among `scores` (policy -> SLO), first on ties;
    ("", nan) when none ran."""
    statics = [(p, s) for p, s in scores.items() if p.startswith("static-")]
    return max(statics, key=lambda t: t[1]) if statics else ("", float("nan"))


def _day_run(case: tuple[float, float]) -> tuple[str, float, float]:
    import bench_fleet_common as common
    import bench_fleet_cost as cost

    peak, ttft = case
    common.TTFT_OVERRIDE[cost.TRACE] = ttft
    row = cost.run_policy("ours (semipd)", cost.DAY_S, peak)
    return f"peak {peak:g} ttft {ttft:g}", row["slo"], row["accelerator_hours"]


def day_references(path: Path) -> dict[str, float]:
    """Per day-sweep case, the GPU-hours of the cheapest replica-only fixed split meeting 99 % (the
    criterion's bar, bench_fleet_cost.cheapest_fixed) from a committed fleet_cost.json."""
    import bench_fleet_cost as cost

    refs = {}
    for key, rows in json.loads(path.read_text()).items():
        name = key if key.startswith("peak_") else f"peak_{cost.PEAK:g}_{key}"
        peak, ttft = name.removeprefix("peak_").split("_ttft_")
        ref = cost.cheapest_fixed(rows)
        if ref is not None:
            refs[f"peak {float(peak):g} ttft {float(ttft.removesuffix('s')):g}"] = ref["accelerator_hours"]
    return refs


def collect(args: argparse.Namespace) -> dict[str, Any]:
    """Run the command at the tree already imported; a JSON-able result."""
    pool = multiprocessing.get_context("fork").Pool(args.jobs)
    with pool:
        if args.cmd == "sets":
            cases = [c for s in args.sets for c in SETS[s]]
            run = partial(_set_run, buckets=args.buckets, static=args.static, prior=args.prior, policy=args.policy)
            return {"runs": [x for out in pool.map(run, cases, chunksize=1) for x in out]}
        if args.cmd == "day":
            import bench_fleet_cost as cost

            cases = [(p, float(t)) for t in args.ttft.split(",") for p in cost.SENSITIVITY_PEAKS]
            return {"runs": [[k, s, h] for k, s, h in pool.map(_day_run, cases, chunksize=1)]}
    return {}


def _single(args: argparse.Namespace) -> None:
    """windows / decisions: one run, printed directly (no side-by-side)."""
    import bench_fleet_attainment as fa
    import bench_fleet_common as common

    for policy in args.policies or ["ours"]:
        truth = (args.truth[0], args.truth[1])
        run = fa.Run(args.trace, policy, args.rate, args.scale, eps=args.eps, truth=truth, seed=args.seed,
                     itl_buckets=args.buckets, **_prior(args.prior))  # fmt: skip
        res, p99s, requests = fa.simulate(run)
        score = common.scored(requests, p99s, common.ttft_slo(args.trace), fa.itl_slo(args.scale))
        if args.cmd == "windows":
            met = " ".join(f"{w[1]}/{w[0]}" for w in score.windows)
            print(f"{policy:16s} {score.slo_attainment:.4f}  {met}")
            continue
        print(f"{policy} SLO {score.slo_attainment:.4f}; window p99 ITL (ms):", [round(p * 1e3, 1) for p in p99s])
        for a in res.actions:
            line = f"{a.time:7.1f} {a.action} {a.target} {a.value} | {a.reason}"
            if args.grep in line and a.action not in ("SetSplit", "SplitDone"):
                print(line[: args.width])


def _at_revision(rev: str, argv: list[str]) -> dict[str, Any]:
    """Run this command at git revision `rev` in a temporary worktree (this file's code, that tree's
    bench and operator) and return its JSON result."""
    with tempfile.TemporaryDirectory(prefix="probe-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(tree), rev], check=True)
        try:
            out = subprocess.run(
                [sys.executable, __file__, *argv, "--tree", str(tree), "--json"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=True)
    result: dict[str, Any] = json.loads(out)
    return result


def report(args: argparse.Namespace, here: dict[str, Any], there: dict[str, Any] | None) -> None:
    import bench_fleet_cost as cost

    rev = {k: v for k, *v in there["runs"]} if there else {}
    refs = day_references(BENCH / "results" / "fleet_cost.json") if args.cmd == "day" else {}
    met = [0, 0]
    beaten = 0
    for key, slo, *rest in here["runs"]:
        line = f"{key:42s} {slo:.4f}"
        if args.cmd == "sets" and rest and rest[0]:
            beaten += slo < rest[1]
            line += f"  best static {rest[1]:.4f} {rest[0]:14s} {slo - rest[1]:+.4f}"
        if args.cmd == "day":
            ok = slo >= cost.TARGET and rest[0] <= refs.get(key, float("inf"))
            met[0] += ok
            line += f" {rest[0]:6.2f} GPU-h (ref {refs.get(key, float('nan')):.2f}) {'OK' if ok else 'no'}"
        if key in rev:
            line += f"   {args.rev}: {rev[key][0]:.4f} ({slo - rev[key][0]:+.4f})"
            if args.cmd == "day":
                ok = rev[key][0] >= cost.TARGET and rev[key][1] <= refs.get(key, float("inf"))
                met[1] += ok
                line += f" {rev[key][1]:6.2f} GPU-h {'OK' if ok else 'no'}"
        print(line)
    total = sum(r[1] for r in here["runs"])
    summary = f"SUM {total:.3f}" + (f"   {args.rev}: {sum(v[0] for v in rev.values()):.3f}" if rev else "")
    if args.cmd == "day":
        summary += f"   criterion {met[0]}/{len(here['runs'])}" + (f", {args.rev}: {met[1]}" if rev else "")
    if args.cmd == "sets" and args.static:
        summary += f"   below best static: {beaten}/{len(here['runs'])}"
    print(summary)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sets = sub.add_parser("sets")
    sets.add_argument("sets", nargs="*", choices=sorted(SETS), default=["std"])
    sets.add_argument("--buckets", default="sglang", help="the engine's ITL bucket layout (fair judge ITL_LAYOUTS)")
    sets.add_argument("--prior", default="take-turns", help=PRIOR_HELP)
    sets.add_argument("--static", action="store_true", help="also the best static split per run (6x the time)")
    sets.add_argument("--policy", default="ours", choices=("ours", "ours-restart", "ours-start-80-100"),
                      help="the controller variant to run (ours-restart: restart-mode engines)")  # fmt: skip
    day = sub.add_parser("day")
    day.add_argument("--ttft", default="1,1.5,2,3", help="TTFT SLOs (s), comma-separated")
    for name in ("windows", "decisions"):
        one = sub.add_parser(name)
        one.add_argument("trace")
        one.add_argument("rate", type=float)
        one.add_argument("scale", choices=("tight", "paper"))
        one.add_argument("policies", nargs="*", help="fair-judge policy names (windows; default ours)")
        one.add_argument("--grep", default="", help="only decision lines containing this")
        one.add_argument("--width", type=int, default=400)
        one.add_argument("--truth", type=float, nargs=2, default=(1.0, 1.0), help="prefill, decode time x")
        one.add_argument("--eps", type=float, default=0.2, help="interference")
        one.add_argument("--seed", type=int, default=0, help="mix-shift trace draw and router ties")
        one.add_argument("--buckets", default="sglang", help="the engine's ITL bucket layout (fair judge ITL_LAYOUTS)")
        one.add_argument("--prior", default="take-turns", help=PRIOR_HELP)
    for p in (sets, day):
        p.add_argument("--rev", help="also run at this git revision, side by side")
        p.add_argument("--jobs", type=int, default=2)
        p.add_argument("--tree", help=argparse.SUPPRESS)
        p.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    _import_tree(Path(args.tree) if getattr(args, "tree", None) else ROOT)
    if args.cmd in ("windows", "decisions"):
        _single(args)
        return 0
    if args.json:
        print(json.dumps(collect(args)))
        return 0
    argv = [a for a in sys.argv[1:] if a not in ("--rev", args.rev)] if args.rev else []
    there = _at_revision(args.rev, argv) if args.rev else None
    report(args, collect(args), there)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
