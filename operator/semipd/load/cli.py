"""`semipd load`: replay a trace or synthetic arrivals against endpoints and print a latency summary."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence

from semipd.cliargs import STDOUT, Parser, duration, fail, positive_duration, write_output
from semipd.load.progress import ProgressBar, wanted
from semipd.load.prompts import PROMPT_TOKENS_FIELD
from semipd.load.runner import LoadConfig, RemoteEndpointError, run_load
from semipd.load.stats import SLO, Distribution, format_summary
from semipd.traces import (
    KNOWN_TRACES,
    TraceFormatError,
    TraceRequest,
    clip_lengths,
    compress_time,
    load_trace,
    mean_rate,
    scale_to_rate,
    synthetic,
    window,
)


def _positive(v: str) -> float:
    f = float(v)
    if f <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {v}")
    return f


def _positive_int(v: str) -> int:
    i = int(v)
    if i <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {v}")
    return i


def build_parser(prog: str = "semipd load") -> argparse.ArgumentParser:
    p = Parser(
        prog=prog,
        description="Replay a trace or synthetic arrivals against OpenAI-compatible endpoints "
        "(streaming /v1/completions) and report TTFT, ITL, e2e, SLO attainment and goodput.",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", help=f"trace file (.csv Azure 2023, .jsonl Mooncake) or one of {sorted(KNOWN_TRACES)}")
    src.add_argument("--synthetic", choices=["poisson", "gamma"], help="synthetic renewal arrivals at --rate")
    p.add_argument(
        "--endpoint",
        action="append",
        required=True,
        help="base URL, e.g. http://127.0.0.1:8000 (repeat or comma-separate for several)",
    )
    p.add_argument("--model", default="default", help="model name sent in the request body")
    rate = p.add_mutually_exclusive_group()
    rate.add_argument("--rate", type=_positive, help="mean arrival rate, req/s (trace: rescale time to it)")
    rate.add_argument("--time-scale", type=_positive, help="replay a trace this many times faster")
    p.add_argument("--cv", type=_positive, default=2.0, help="gamma inter-arrival coefficient of variation")
    p.add_argument("--input-tokens", type=_positive_int, default=512, help="synthetic prompt length")
    p.add_argument("--output-tokens", type=_positive_int, default=128, help="synthetic output length")
    p.add_argument("--lengths-from", help="synthetic: resample token counts from this trace")
    p.add_argument("--seed", type=int, default=0, help="random seed of synthetic arrivals and lengths")
    p.add_argument("--start", type=duration, default="0s", help="trace: skip to this replay time (after scaling)")
    p.add_argument("--duration", type=positive_duration, help="stop sending after this long (e.g. 60s, 5m)")
    p.add_argument("--max-requests", type=_positive_int, help="send at most this many requests (default: all)")
    p.add_argument("--max-input-tokens", type=_positive_int, help="clip prompt lengths")
    p.add_argument("--max-output-tokens", type=_positive_int, help="clip output lengths")
    p.add_argument("--concurrency", type=_positive_int, default=64, help="max requests in flight")
    p.add_argument(
        "--router",
        choices=("round-robin", "least-outstanding"),
        default="round-robin",
        help="how requests are spread over the endpoints",
    )
    p.add_argument("--request-timeout", type=positive_duration, default="5m", help="per-request timeout")
    p.add_argument(
        "--drain-timeout",
        type=positive_duration,
        default="60s",
        help="after the last dispatch, wait this long for in-flight requests, then cancel them",
    )
    p.add_argument("--ttft-slo", type=positive_duration, help="TTFT SLO (e.g. 500ms)")
    p.add_argument("--itl-slo", type=positive_duration, help="inter-token (per-request TPOT) SLO (e.g. 50ms)")
    p.add_argument("--json", dest="json_path", help="write per-request results and the summary here (- for stdout)")
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: only when stderr is a terminal)",
    )
    p.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow public addresses and hostnames (loopback and pod IPs need no flag)",
    )
    p.add_argument(
        "--prompt-text",
        choices=["full", "stub"],
        default="full",
        help="full: prompt text of about the trace's length; stub: short text (simulated engine)",
    )
    p.add_argument("--no-extensions", action="store_true", help="do not send the prompt token count field")
    p.add_argument(
        "--prompt-tokens-field",
        default=PROMPT_TOKENS_FIELD,
        help="name of the extension field carrying the prompt token count",
    )
    p.add_argument("--api-path", default="/v1/completions", help="path of the completions API")
    p.add_argument("--describe", action="store_true", help="print the schedule's statistics and exit")
    p.add_argument("--fail-on-error", action="store_true", help="exit 1 if any request did not succeed")
    return p


def build_schedule(ns: argparse.Namespace) -> list[TraceRequest]:
    """The request schedule the arguments describe (pure apart from reading the trace file)."""
    if ns.synthetic:
        if ns.rate is None:
            raise ValueError("--synthetic needs --rate")
        if ns.duration is None and ns.max_requests is None:
            raise ValueError("--synthetic needs --duration or --max-requests")
        lengths = load_trace(ns.lengths_from) if ns.lengths_from else None
        reqs = synthetic(
            ns.rate,
            count=ns.max_requests,
            duration_s=ns.duration,
            cv=1.0 if ns.synthetic == "poisson" else ns.cv,
            input_tokens=ns.input_tokens,
            output_tokens=ns.output_tokens,
            lengths_from=lengths,
            seed=ns.seed,
        )
    else:
        reqs = load_trace(ns.trace)
        if ns.rate is not None:
            reqs = scale_to_rate(reqs, ns.rate)
        elif ns.time_scale is not None:
            reqs = compress_time(reqs, ns.time_scale)
        if ns.start > 0 or ns.duration is not None:
            reqs = window(reqs, ns.start, ns.duration if ns.duration is not None else float("inf"))
    if ns.max_requests is not None:
        reqs = reqs[: ns.max_requests]
    if ns.max_input_tokens is not None or ns.max_output_tokens is not None:
        reqs = clip_lengths(reqs, ns.max_input_tokens, ns.max_output_tokens)
    return reqs


def describe(reqs: Sequence[TraceRequest]) -> str:
    if not reqs:
        return "empty schedule"
    ins = Distribution.of(float(r.input_tokens) for r in reqs)
    outs = Distribution.of(float(r.output_tokens) for r in reqs)
    return (
        f"{len(reqs)} requests over {reqs[-1].arrival_s:.1f} s ({mean_rate(reqs):.2f} req/s)\n"
        f"input tokens  mean {ins.mean:.0f}  p50 {ins.p50:.0f}  p99 {ins.p99:.0f}  max {ins.max:.0f}\n"
        f"output tokens mean {outs.mean:.0f}  p50 {outs.p50:.0f}  p99 {outs.p99:.0f}  max {outs.max:.0f}"
    )


def main(argv: list[str] | None = None, prog: str = "semipd load") -> int:
    parser = build_parser(prog)
    ns = parser.parse_args(argv)
    endpoints = tuple(e.strip() for arg in ns.endpoint for e in arg.split(",") if e.strip())
    try:
        config = LoadConfig(
            endpoints=endpoints,
            model=ns.model,
            concurrency=ns.concurrency,
            router=ns.router,
            max_requests=ns.max_requests,
            duration_s=ns.duration,
            request_timeout_s=ns.request_timeout,
            drain_timeout_s=ns.drain_timeout,
            api_path=ns.api_path,
            prompt_text=ns.prompt_text,
            extensions=not ns.no_extensions,
            prompt_tokens_field=ns.prompt_tokens_field,
            allow_remote=ns.allow_remote,
        )
        schedule = build_schedule(ns)
    except (RemoteEndpointError, TraceFormatError, ValueError, OSError) as e:
        return fail(prog, e)
    if ns.describe:
        print(describe(schedule))
        return 0
    bar = ProgressBar() if wanted(ns.progress) else None
    try:
        result = asyncio.run(run_load(schedule, config, on_progress=bar))
    finally:
        if bar is not None:
            bar.close()
    slo = SLO(ns.ttft_slo, ns.itl_slo)
    summary = result.summary(slo)
    # With `--json -` standard output carries the JSON alone; the human summary goes to stderr.
    print(format_summary(summary), file=sys.stderr if ns.json_path == STDOUT else sys.stdout)
    if ns.json_path:
        write_output(ns.json_path, json.dumps(result.to_json(slo), indent=1) + "\n")
    if ns.fail_on_error and summary.ok < summary.requests:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
