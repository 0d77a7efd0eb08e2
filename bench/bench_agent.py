"""Benchmark: the agent's split-switch time and the simulated engine's one-core emulation capacity.

Switch time: a real pod (agent + sim engine, h200 / llama-3-8b) swaps its prefill worker N times,
cycling 30/50/70/90 %, idle and under streaming load, at --speedup 1000 (the modelled worker
start-up of ~3.2 s shrinks to ~3 ms, so what is left is the agent's own cost: process start,
attach, readiness polling, activation, draining and stopping the old worker), plus a few switches
in real time (speedup 1) where the modelled cost dominates.

Engine capacity: the engine runs at --speedup 1e6 (model time ~0) pinned to CPU 0 and a closed-loop
client pinned to CPU 1 keeps C requests in flight for D seconds. Requests per engine CPU-second is
the engine's one-core capacity whether or not the client saturates it. Medians of --repeats runs.

    .venv/bin/python bench/bench_agent.py [--switches 100] [--real-time-switches 5] [--repeats 3]

Writes bench/results/agent.md and bench/results/agent.png (needs matplotlib).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from semipd.perf import LatencyModel
from semipd.sim.engine.localpod import LocalPod, PodOptions
from semipd.sim.engine.probe import stream_completion

RESULTS = Path(__file__).resolve().parent / "results"
CYCLE = (30, 50, 70, 90)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


@dataclass
class SwitchRun:
    label: str
    speedup: float
    durations: list[float]
    modelled: float
    requests: int = 0
    failed: int = 0


async def _load(pod: LocalPod, stop: asyncio.Event, counts: list[int]) -> None:
    async with aiohttp.ClientSession() as session:
        i = 0
        while not stop.is_set():
            r = await stream_completion(session, pod.engine_url, 200 + (i * 97) % 1500, 8 + i % 24)
            counts[0] += 1
            counts[1] += 0 if r.ok else 1
            i += 1


async def measure_switches(root: Path, label: str, speedup: float, n: int, loaded: bool) -> SwitchRun:
    pod = LocalPod(root / label.replace(" ", "-"), PodOptions(speedup=speedup, prefill_percent=50))
    pod.start(timeout=120)
    counts = [0, 0]
    stop = asyncio.Event()
    load = [asyncio.ensure_future(_load(pod, stop, counts)) for _ in range(4 if loaded else 0)]
    durations = []
    try:
        for i in range(n):
            status, body = await asyncio.to_thread(pod.put_split, CYCLE[i % len(CYCLE)])
            if status != 200:
                raise RuntimeError(f"switch {i} answered {status}: {body}")
            durations.append(float(body["durationSeconds"]))
    finally:
        stop.set()
        await asyncio.gather(*load)
        pod.stop()
    modelled = LatencyModel.from_names("h200", "llama-3-8b").switch_cost() / speedup
    return SwitchRun(label, speedup, durations, modelled, counts[0], counts[1])


@dataclass
class CapacityRun:
    label: str
    requests: float
    tokens: float
    wall_rps: float
    rps_per_cpu: float
    tokens_per_cpu: float
    cpu_use: float


async def _closed_loop(
    pod: LocalPod, stream: bool, max_tokens: int, concurrency: int, seconds: float
) -> tuple[int, int]:
    done = [0, 0]
    deadline = time.monotonic() + seconds
    body = {"prompt_tokens": 128, "prompt": "x", "max_tokens": max_tokens}

    async def worker(session: aiohttp.ClientSession) -> None:
        while time.monotonic() < deadline:
            if stream:
                r = await stream_completion(session, pod.engine_url, 128, max_tokens)
                if not r.ok:
                    raise RuntimeError(r.error)
                done[1] += r.tokens
            else:
                async with session.post(pod.engine_url + "/v1/completions", json=body) as resp:
                    doc = await resp.json()
                    if resp.status != 200:
                        raise RuntimeError(doc)
                    done[1] += doc["usage"]["completion_tokens"]
            done[0] += 1

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return done[0], done[1]


async def measure_capacity(
    root: Path, label: str, stream: bool, max_tokens: int, concurrency: int, seconds: float
) -> CapacityRun:
    pod = LocalPod(root / f"cap-{label}".replace(" ", "-"), PodOptions(speedup=1e6, prefill_percent=100))
    pod.start(timeout=120)
    try:
        pids = pod.pids()
        engine = [pids["engine"], *pids["workers"].values()]
        for pid in engine:
            os.sched_setaffinity(pid, {0})
        os.sched_setaffinity(0, {1})
        await _closed_loop(pod, stream, max_tokens, concurrency, 1.0)  # warm-up
        cpu0 = sum(cpu_seconds(p) for p in engine)
        t0 = time.monotonic()
        requests, tokens = await _closed_loop(pod, stream, max_tokens, concurrency, seconds)
        wall = time.monotonic() - t0
        cpu = sum(cpu_seconds(p) for p in engine) - cpu0
    finally:
        os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
        pod.stop()
    return CapacityRun(label, requests, tokens, requests / wall, requests / cpu, tokens / cpu, cpu / wall)


def median_run(runs: list[CapacityRun]) -> CapacityRun:
    def med(attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in runs)

    return CapacityRun(
        runs[0].label, med("requests"), med("tokens"), med("wall_rps"), med("rps_per_cpu"),
        med("tokens_per_cpu"), med("cpu_use"),
    )  # fmt: skip


def plot(switches: list[SwitchRun], capacity: list[CapacityRun], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for run in switches:
        if run.speedup < 100:
            continue
        xs = sorted(d * 1000 for d in run.durations)
        ys = [(i + 1) / len(xs) for i in range(len(xs))]
        ax1.step(xs, ys, where="post", label=f"{run.label} (n={len(xs)})")
    ax1.set_xlabel("switch duration (ms), speedup 1000")
    ax1.set_ylabel("fraction of switches")
    ax1.set_title("Agent split switch time (CDF)")
    ax1.grid(alpha=0.3)
    ax1.legend()
    ax2.bar([c.label for c in capacity], [c.rps_per_cpu for c in capacity], color="tab:green")
    ax2.set_ylabel("requests per engine CPU-second")
    ax2.set_title("Sim engine one-core capacity (model time ~0)")
    ax2.tick_params(axis="x", rotation=20)
    ax2.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def write_report(switches: list[SwitchRun], capacity: list[CapacityRun], args: argparse.Namespace) -> str:
    lines = [
        "# Agent switch time and sim-engine capacity",
        "",
        "`bench/bench_agent.py` (real processes on loopback: agent + sim engine h200 / llama-3-8b, "
        "prefill share cycling 30/50/70/90 %). The 2-core machine is shared with other jobs.",
        "",
        "## Split switch time (agent-measured, PUT accepted -> new split in force)",
        "",
        "| run | speedup | switches | modelled worker start | median | p90 | p99 | max "
        "| overhead (median - modelled) | load requests (failed) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in switches:
        d = r.durations
        med = statistics.median(d)
        lines.append(
            f"| {r.label} | {r.speedup:g} | {len(d)} | {r.modelled * 1000:.1f} ms | {med * 1000:.0f} ms "
            f"| {quantile(d, 0.9) * 1000:.0f} ms | {quantile(d, 0.99) * 1000:.0f} ms | {max(d) * 1000:.0f} ms "
            f"| {(med - r.modelled) * 1000:.0f} ms | {r.requests} ({r.failed}) |"
        )
    idle = next(r for r in switches if r.label == "idle")
    loaded = next(r for r in switches if r.label == "under load")
    ratio = statistics.median(loaded.durations) / statistics.median(idle.durations)
    lines += [
        "",
        f"Under load / idle median ratio: **{ratio:.2f}x**. At speedup 1000 the modelled worker start-up is "
        "~3 ms, so the median is the agent's own cost (spawning a Python prefill-worker process, its "
        "attach over the unix socket, 20 ms readiness polling, activation, waiting for the old worker's "
        "in-flight batch and stopping it). In real time the modelled start-up (3.2 s for h200, an "
        "estimate: Semi-PD publishes no switch time) dominates.",
        "",
        "## Sim engine capacity on one core (speedup 1e6, so model time ~0)",
        "",
        f"Closed loop, {args.concurrency} requests in flight, {args.seconds:g} s per run, median of "
        f"{args.repeats} runs; engine (decode owner + prefill worker) pinned to CPU 0, client to CPU 1. "
        "Requests per engine CPU-second is the one-core capacity even where the client is the bottleneck "
        "(engine CPU use < 100 %).",
        "",
        "| workload | requests/run | wall req/s | req per engine CPU-s | tokens per engine CPU-s | engine CPU use |",
        "|---|---|---|---|---|---|",
    ]
    for c in capacity:
        lines.append(
            f"| {c.label} | {c.requests:.0f} | {c.wall_rps:.0f} | {c.rps_per_cpu:.0f} | {c.tokens_per_cpu:.0f} "
            f"| {c.cpu_use * 100:.0f} % |"
        )
    by = {c.label: c for c in capacity}
    if "stream 16 tok" in by and "non-stream 16 tok" in by:
        r = by["non-stream 16 tok"].rps_per_cpu / by["stream 16 tok"].rps_per_cpu
        lines += ["", f"Non-streaming / streaming capacity at 16 tokens: **{r:.2f}x** (one SSE write per token)."]
    lines += ["", "![switch time CDF and engine capacity](agent.png)", ""]
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-agent-") as tmp:
        root = Path(tmp)
        switches = [
            await measure_switches(root, "idle", 1000.0, args.switches, loaded=False),
            await measure_switches(root, "under load", 1000.0, args.switches, loaded=True),
            await measure_switches(root, "real time", 1.0, args.real_time_switches, loaded=False),
        ]
        for s in switches:
            print(f"{s.label}: median {statistics.median(s.durations) * 1000:.0f} ms over {len(s.durations)}")
        configs = [
            ("stream 1 tok", True, 1),
            ("stream 16 tok", True, 16),
            ("non-stream 16 tok", False, 16),
            ("stream 128 tok", True, 128),
        ]
        capacity = []
        for label, stream, tokens in configs:
            runs = [
                await measure_capacity(root, f"{label}-{i}", stream, tokens, args.concurrency, args.seconds)
                for i in range(args.repeats)
            ]
            run = median_run(runs)
            run.label = label
            capacity.append(run)
            print(f"{label}: {run.rps_per_cpu:.0f} req per engine CPU-s, engine CPU {run.cpu_use * 100:.0f} %")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "agent.md").write_text(write_report(switches, capacity, args))
    plot(switches, capacity, RESULTS / "agent.png")
    raw = {
        "switches": {s.label: s.durations for s in switches},
        "capacity": [c.__dict__ for c in capacity],
    }
    (RESULTS / "agent.json").write_text(json.dumps(raw, indent=1))
    print(f"wrote {RESULTS / 'agent.md'}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--switches", type=int, default=100)
    p.add_argument("--real-time-switches", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--seconds", type=float, default=8.0)
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()
