"""Benchmark: how much load `semipd load` can drive from one core.

A minimal streaming server runs in a separate process on 127.0.0.1 and answers instantly, so the
load generator is the bottleneck. Every request of a burst is scheduled at t=0 with bounded
concurrency; we report wall-clock requests/s and, since the generator is one asyncio thread,
requests and streamed chunks per CPU-second of the generator process (= its one-core capacity).
Medians of --repeats runs. Writes bench/results/load_generator.md.

    .venv/bin/python bench/load_generator.py [--requests 2000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from semipd.load import LoadConfig, run_load
from semipd.traces import TraceRequest

SERVER = Path(__file__).with_name("instant_openai_server.py")


def cpu_self() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def one_run(url: str, n: int, out_tokens: int, in_tokens: int, mode: str, concurrency: int) -> dict[str, float]:
    schedule = [TraceRequest(0.0, in_tokens, out_tokens) for _ in range(n)]
    cfg = LoadConfig(endpoints=(url,), concurrency=concurrency, prompt_text=mode)  # type: ignore[arg-type]
    c0, t0 = cpu_self(), time.perf_counter()
    res = asyncio.run(run_load(schedule, cfg))
    wall, cpu = time.perf_counter() - t0, cpu_self() - c0
    ok = sum(r.status == "ok" for r in res.results)
    if ok != n:
        raise SystemExit(f"{n - ok} requests failed: {[r.error for r in res.results if r.status != 'ok'][:3]}")
    chunks = sum(r.output_tokens for r in res.results)
    return {"wall_rps": n / wall, "cpu_rps": n / cpu, "cpu_chunks_s": chunks / cpu, "cpu_util": cpu / wall}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "load_generator.md"))
    args = ap.parse_args()
    server = subprocess.Popen([sys.executable, str(SERVER)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = f"http://127.0.0.1:{server.stdout.readline().strip()}"
        cases = [(1, 100, "stub"), (16, 100, "stub"), (128, 100, "stub"), (16, 2000, "full"), (128, 2000, "full")]
        rows = []
        for out_tokens, in_tokens, mode in cases:
            n = args.requests if out_tokens <= 16 else max(200, args.requests // 4)
            runs = [one_run(url, n, out_tokens, in_tokens, mode, args.concurrency) for _ in range(args.repeats)]
            med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            rows.append((out_tokens, in_tokens, mode, n, med))
            print(out_tokens, in_tokens, mode, {k: round(v, 1) for k, v in med.items()}, flush=True)
    finally:
        server.terminate()
        server.wait(10)
    lines = [
        "# Load generator throughput (one core)",
        "",
        f"`bench/load_generator.py`: {args.repeats} runs each, median; concurrency {args.concurrency}; an instant",
        "aiohttp streaming server in another process on 127.0.0.1 (one SSE chunk per token). The generator",
        "is one asyncio thread, so requests per CPU-second is its one-core capacity. The 2-core machine is",
        "shared with the server and other jobs, so wall-clock rates understate it.",
        "",
        "| output tokens | prompt tokens | prompt text | requests | wall req/s | req per CPU-s "
        "| chunks per CPU-s | generator CPU use |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for out_tokens, in_tokens, mode, n, m in rows:
        lines.append(
            f"| {out_tokens} | {in_tokens} | {mode} | {n} | {m['wall_rps']:.0f} | {m['cpu_rps']:.0f} | "
            f"{m['cpu_chunks_s']:.0f} | {m['cpu_util'] * 100:.0f} % |"
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
