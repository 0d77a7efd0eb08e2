"""Times a step alone on a lane, and while another step keeps a second lane busy (torch).

On CUDA each step is captured once as a CUDA graph on its lane's stream (a decode step is hundreds of
small kernels, which Python could not launch fast enough to keep the GPU busy) and timed with CUDA events
around each replay. A co-run interleaves the background lane's replays with the measured lane's so both
queues stay full, then checks that the background was still running when the last measured replay ended.
On the CPU a lane is a thread and the clock is perf_counter.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from bench.gpu.partition import Lane

Step = Callable[[], torch.Tensor]


@dataclass
class Prepared:
    lane: Lane
    run: Callable[[], object]
    graph: torch.cuda.CUDAGraph | None = None


def prepare(step: Step, lane: Lane, use_graph: bool) -> Prepared:
    """The step made ready to run on `lane`: warmed up, and captured as a graph where asked."""
    if lane.stream is None:
        step()
        return Prepared(lane, step)
    stream = lane.stream
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            step()
    stream.synchronize()
    if not use_graph:
        return Prepared(lane, step)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        step()
    stream.synchronize()
    return Prepared(lane, graph.replay, graph)


def _timed_cuda(p: Prepared, reps: int, between: Callable[[int], None] | None = None) -> list[float]:
    """Per-run latencies; `between(i)` is called before run i and, with i = reps, after the last one."""
    stream = p.lane.stream
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for i, (start, end) in enumerate(events):
        if between is not None:
            between(i)
        with torch.cuda.stream(stream):
            start.record(stream)
            p.run()
            end.record(stream)
    if between is not None:
        between(reps)
    stream.synchronize()
    return [start.elapsed_time(end) / 1e3 for start, end in events]


def _timed_cpu(p: Prepared, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        p.run()
        out.append(time.perf_counter() - t0)
    return out


def reps_for(p: Prepared, target_s: float, min_reps: int, max_reps: int) -> tuple[int, float]:
    """How many replays fill about target_s, from one timed replay; and that replay's time."""
    one = (_timed_cuda(p, 1) if p.lane.stream is not None else _timed_cpu(p, 1))[0]
    return max(min_reps, min(max_reps, math.ceil(target_s / max(one, 1e-9)))), one


def solo(p: Prepared, reps: int) -> list[float]:
    """Latency of each of `reps` runs of the step alone on its lane."""
    return _timed_cuda(p, reps) if p.lane.stream is not None else _timed_cpu(p, reps)


@dataclass
class CoRun:
    latencies: list[float]
    background_runs: int
    covered: bool
    """True when the background lane was still busy after the measured lane's last run."""


def corun(measured: Prepared, background: Prepared, reps: int, ratio: float) -> CoRun:
    """Latency of each measured run while `background` runs beside it; `ratio` = measured / background step time."""
    if measured.lane.stream is None:
        return _corun_cpu(measured, background, reps)
    bg_stream = background.lane.stream
    lead = max(2.0, 2.0 * ratio)  # background runs queued ahead of the measured lane, in background runs
    launched = 0

    def top_up(i: int) -> None:
        """Keep the background `lead` runs ahead of where the measured lane will be after its run i."""
        nonlocal launched
        want = math.ceil(lead + (i + 1) * ratio)
        with torch.cuda.stream(bg_stream):
            while launched < want:
                background.run()
                launched += 1

    top_up(-1)  # the background starts first
    # One extra measured run first, dropped: it may start before the background has ramped up.
    times = _timed_cuda(measured, reps + 1, between=top_up)[1:]
    tail = torch.cuda.Event()
    tail.record(bg_stream)
    covered = not tail.query()  # the measured stream is synchronised; is the background still queued?
    bg_stream.synchronize()
    return CoRun(times, launched, covered)


def _corun_cpu(measured: Prepared, background: Prepared, reps: int) -> CoRun:
    stop = threading.Event()
    runs = 0
    failure: list[BaseException] = []

    def loop() -> None:
        nonlocal runs
        try:
            while not stop.is_set():
                background.run()
                runs += 1
        except BaseException as e:  # surfaced below: a dead background would make the co-run a solo run
            failure.append(e)

    t = threading.Thread(target=loop, name="background-phase", daemon=True)
    t.start()
    while runs == 0 and t.is_alive():
        time.sleep(0.001)
    times = _timed_cpu(measured, reps)
    covered = t.is_alive()
    stop.set()
    t.join()
    if failure:
        raise RuntimeError("background phase failed during the co-run") from failure[0]
    return CoRun(times, runs, covered)
