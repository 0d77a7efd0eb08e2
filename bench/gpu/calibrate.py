"""Measures prefill/decode contention on one GPU and writes the parameters the simulator reads.

    python bench/gpu/calibrate.py --out bench/gpu/results/contention-h200.json      # one H200, < 10 min
    python bench/gpu/calibrate.py --device cpu --tiny --out /tmp/contention.json    # plumbing test, seconds

For each model (Llama-3-8B and Qwen3-32B shapes, random weights) it times a prefill step and decode steps
alone on the whole GPU, alone on SM partitions, and co-running on two disjoint partitions, then fits k per
phase and the co-run interference eps (bench/gpu/fit.py) and writes them as semipd.io/contention/v1 JSON.
See bench/gpu/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` and `semipd` importable from the checkout
    _root = Path(__file__).resolve().parents[2]
    sys.path[:0] = [str(_root), str(_root / "operator")]

import torch

from bench.gpu import partition, timing
from bench.gpu.fit import Phase, Sample, contention_document
from bench.gpu.workload import DecodeConfig, LayerShape, PrefillConfig, Steps


@dataclass(frozen=True)
class Plan:
    """What to measure. The defaults are sized for one H200 in well under 10 minutes."""

    models: tuple[str, ...] = ("llama-3-8b", "qwen3-32b")
    layers: int = 4
    prefill: tuple[PrefillConfig, ...] = (PrefillConfig(sequences=1, tokens=4096),)
    decode: tuple[DecodeConfig, ...] = (DecodeConfig(batch=32, context=2048), DecodeConfig(batch=128, context=4096))
    solo_splits: tuple[int, ...] = (16, 32, 64, 96)
    """SM counts of the first lane; both lanes of each split are timed alone for every phase."""
    corun_splits: tuple[int, ...] = (32, 64, 96)
    """Prefill on the first lane (these SMs), decode on the rest, for every (prefill, decode) config pair."""
    target_s: float = 0.25
    min_reps: int = 5
    max_reps: int = 200
    tiny: bool = False
    dtype: str = "bfloat16"
    use_graphs: bool = True
    sms_scale: float = 1.0
    """Splits are given for a 132-SM H200; other devices scale them by total_sms / 132."""
    notes: list[str] = field(default_factory=list)


def tiny_shape(model: str) -> LayerShape:
    """The model's layer shrunk 64x in width (head_dim 128 -> 16): same GQA ratio, same code paths."""
    s = LayerShape.of(model)
    return replace(
        s, name=f"{model}-tiny", hidden=s.hidden // 64, q_heads=s.q_heads // 8, kv_heads=s.kv_heads // 4,
        head_dim=s.head_dim // 8, ffn=s.ffn // 64,
    )  # fmt: skip


TINY_PLAN = Plan(
    layers=2,
    prefill=(PrefillConfig(sequences=2, tokens=32),),
    decode=(DecodeConfig(batch=4, context=64),),
    solo_splits=(25, 50),
    corun_splits=(50,),
    target_s=0.005,
    min_reps=3,
    max_reps=10,
    tiny=True,
    dtype="float32",
    use_graphs=False,
)


def _say(t0: float, msg: str) -> None:
    print(f"[{time.monotonic() - t0:7.1f}s] {msg}", flush=True)


def _median(xs: list[float]) -> float:
    return statistics.median(xs)


class Bench:
    def __init__(self, plan: Plan, device: torch.device, part: partition.Partitioner) -> None:
        self.plan, self.device, self.part = plan, device, part
        self.t0 = time.monotonic()
        self.samples: list[Sample] = []
        self.warnings: list[str] = []
        self.corun_meta: list[dict[str, Any]] = []
        self.dtype = getattr(torch, plan.dtype)

    def _sms(self, nominal: int) -> int:
        return self.part.round(round(nominal * self.plan.sms_scale))

    def _sample(
        self, model: str, phase: Phase, cfg: str, lane: partition.Lane, lat: list[float], other: partition.Lane | None
    ) -> Sample:
        s = Sample(
            model=model,
            phase=phase,
            config=cfg,
            share=lane.share,
            other_share=other.share if other else 0.0,
            latency_s=_median(lat),
            reps=len(lat),
            partition_sms=lane.sms,
            other_sms=other.sms if other else 0,
        )
        self.samples.append(s)
        what = f"beside {other.sms} SMs" if other else "alone"
        _say(self.t0, f"{model} {cfg:>22} on {lane.sms:3d} SMs {what:<14} {s.latency_s * 1e3:9.3f} ms (n={s.reps})")
        return s

    def _solo(self, model: str, phase: Phase, cfg: str, step: timing.Step, lane: partition.Lane) -> float:
        p = timing.prepare(step, lane, self.plan.use_graphs)
        reps, _ = timing.reps_for(p, self.plan.target_s, self.plan.min_reps, self.plan.max_reps)
        lat = self._sample(model, phase, cfg, lane, timing.solo(p, reps), None).latency_s
        del p
        return lat

    def run_model(self, model: str) -> dict[str, Any]:
        plan = self.plan
        shape = tiny_shape(model) if plan.tiny else LayerShape.of(model)
        steps = Steps(shape, plan.layers, self.device, self.dtype)
        bytes_per = torch.finfo(self.dtype).bits // 8
        _say(self.t0, f"{model}: {plan.layers} layers of {shape.params / 1e6:.1f} M parameters ({shape.name})")
        phases: list[tuple[Phase, str, timing.Step]] = [
            ("prefill", c.label, steps.prefill_step(c)) for c in plan.prefill
        ]
        phases += [("decode", c.label, steps.decode_step(c)) for c in plan.decode]

        whole = self.part.whole()
        full: dict[str, float] = {}
        for phase, cfg, step in phases:
            full[cfg] = self._solo(model, phase, cfg, step, whole)
        if isinstance(self.part, partition.Streams):
            self._corun_pairs(model, phases, [(whole, self.part.whole())], full)
        else:
            for split in plan.solo_splits:
                lanes = self.part.split(self._sms(split))
                for lane in lanes:
                    for phase, cfg, step in phases:
                        self._solo(model, phase, cfg, step, lane)
                self._close_lanes()
            # Solo samples at the co-run splits' own lanes, so each co-run speed has a solo at its exact share.
            pairs = []
            for split in plan.corun_splits:
                a, b = self.part.split(self._sms(split))
                if split not in plan.solo_splits:
                    for lane in (a, b):
                        for phase, cfg, step in phases:
                            self._solo(model, phase, cfg, step, lane)
                pairs.append((a, b))
            self._corun_pairs(model, phases, pairs, full)
            self._close_lanes()
        del steps
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        return {
            "shape": asdict(shape),
            "layers": plan.layers,
            "dtype": plan.dtype,
            "kv_bytes_per_token_per_layer": shape.kv_bytes_per_token(bytes_per),
        }

    def _close_lanes(self) -> None:
        if isinstance(self.part, partition.GreenContexts):
            self.part.close()

    def _corun_pairs(
        self,
        model: str,
        phases: list[tuple[Phase, str, timing.Step]],
        pairs: list[tuple[partition.Lane, partition.Lane]],
        full: dict[str, float],
    ) -> None:
        """Prefill on each pair's first lane, decode on its second; each phase timed while the other runs."""
        prefills = [(c, s) for p, c, s in phases if p == "prefill"]
        decodes = [(c, s) for p, c, s in phases if p == "decode"]
        for lane_p, lane_d in pairs:
            for cfg_p, step_p in prefills:
                for cfg_d, step_d in decodes:
                    pp = timing.prepare(step_p, lane_p, self.plan.use_graphs)
                    pd = timing.prepare(step_d, lane_d, self.plan.use_graphs)
                    reps_p, t_p = timing.reps_for(pp, self.plan.target_s, self.plan.min_reps, self.plan.max_reps)
                    reps_d, t_d = timing.reps_for(pd, self.plan.target_s, self.plan.min_reps, self.plan.max_reps)
                    for phase, cfg, meas, bg, reps, ratio, lm, lb in (
                        ("prefill", cfg_p, pp, pd, reps_p, t_p / t_d, lane_p, lane_d),
                        ("decode", cfg_d, pd, pp, reps_d, t_d / t_p, lane_d, lane_p),
                    ):
                        r = timing.corun(meas, bg, reps, ratio)
                        if not r.covered:
                            self.warnings.append(f"{model} {cfg} on {lm.sms} SMs: background ended before it")
                        s = self._sample(model, phase, cfg, lm, r.latencies, lb)
                        self.corun_meta.append(
                            {
                                "model": model,
                                "phase": phase,
                                "config": cfg,
                                "with": cfg_d if phase == "prefill" else cfg_p,
                                "sms": lm.sms,
                                "other_sms": lb.sms,
                                "background_runs": r.background_runs,
                                "covered": r.covered,
                                "speed": full[cfg] / s.latency_s,
                            }
                        )
                    del pp, pd

    def partition_check(self) -> dict[str, Any] | None:
        """A compute-bound matmul on a quarter of the SMs: about 0.25 of its whole-GPU speed if partitions hold."""
        if not isinstance(self.part, partition.GreenContexts):
            return None
        n = 8192
        a = torch.randn(n, n, device=self.device, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=self.device, dtype=torch.bfloat16)

        def mm() -> torch.Tensor:
            return a @ b

        t_full = self._time(mm, self.part.whole())
        quarter, _ = self.part.split(self._sms(32))
        t_q = self._time(mm, quarter)
        self._close_lanes()
        speed = t_full / t_q
        out = {"sms": quarter.sms, "share": quarter.share, "matmul_speed": speed}
        if speed > quarter.share * 2.0:
            self.warnings.append(f"SM partition not enforced? matmul on {quarter.share:.2f} of SMs ran at {speed:.2f}")
        _say(self.t0, f"partition check: matmul on {quarter.sms} SMs runs at {speed:.3f} of whole-GPU speed")
        return out

    def _time(self, fn: timing.Step, lane: partition.Lane) -> float:
        p = timing.prepare(fn, lane, use_graph=False)
        return _median(timing.solo(p, 10))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="where to write the contention JSON")
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    ap.add_argument("--hardware", default=None, help="hardware profile name (default: h200 on CUDA, cpu on CPU)")
    ap.add_argument(
        "--partitioning", default="auto", choices=["auto", "green-context", "streams", "mps"],
        help="auto: green contexts when cuda-python has them, else plain streams (MPS is not implemented)",
    )  # fmt: skip
    ap.add_argument("--tiny", action="store_true", help="tiny shapes and grid: for CPU tests")
    ap.add_argument("--models", default=None, help="comma-separated model profile names")
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--target-s", type=float, default=None, help="time to spend on each point")
    ap.add_argument("--no-graphs", action="store_true", help="time eagerly instead of replaying CUDA graphs")
    args = ap.parse_args(argv)

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: torch sees no CUDA device (--device cpu --tiny runs the plumbing)")
    plan = TINY_PLAN if args.tiny else Plan()
    if args.models:
        plan = replace(plan, models=tuple(args.models.split(",")))
    if args.layers:
        plan = replace(plan, layers=args.layers)
    if args.target_s:
        plan = replace(plan, target_s=args.target_s)
    if args.no_graphs or device.type == "cpu":
        plan = replace(plan, use_graphs=False)
    if device.type == "cpu":
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))  # leave room for the co-running thread

    part, why = partition.choose(device, args.partitioning)
    if part.name != "cpu":
        plan = replace(plan, sms_scale=part.total_sms / 132)
    bench = Bench(plan, device, part)
    dev_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    _say(bench.t0, f"device {dev_name}, {part.total_sms} SMs, partitioning {part.name} ({why})")
    check = bench.partition_check()
    hardware = args.hardware or ("h200" if device.type == "cuda" else "cpu")
    if device.type == "cuda" and args.hardware is None and "H200" not in dev_name:
        bench.warnings.append(f"--hardware defaulted to h200 but the device is {dev_name}")
    mps = partition.mps_available() if device.type == "cuda" else False
    per_model: dict[str, dict[str, Any]] = {}
    for i, model in enumerate(plan.models):
        per_model[model] = bench.run_model(model)
        # Written after every model, so a run cut short still leaves what it measured (marked partial).
        doc = contention_document(
            samples=bench.samples,
            hardware=hardware,
            device=dev_name,
            partitioning=part.name,
            measured_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            per_model_extra=per_model,
            extra={
                "complete": i == len(plan.models) - 1,
                "partitioning_reason": why,
                "total_sms": part.total_sms,
                "partition_check": check,
                "mps_daemon": mps,
                "cuda_graphs": plan.use_graphs,
                "torch": torch.__version__,
                "grid": {
                    "models": list(plan.models),
                    "prefill": [c.label for c in plan.prefill],
                    "decode": [c.label for c in plan.decode],
                    "solo_splits": list(plan.solo_splits),
                    "corun_splits": list(plan.corun_splits),
                    "layers": plan.layers,
                },
                "corun": bench.corun_meta,
                "warnings": bench.warnings,
                "elapsed_s": round(time.monotonic() - bench.t0, 1),
            },
        )
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
        _say(
            bench.t0,
            f"wrote {args.out} ({i + 1}/{len(plan.models)} models): prefill_k {doc['prefill_k']:.3g}, "
            f"decode_k {doc['decode_k']:.3g}, eps {doc['interference']:.3g}"
            if doc["prefill_k"] is not None
            else f"wrote {args.out} ({i + 1}/{len(plan.models)} models): unpartitioned, nothing fitted",
        )
    part.close()
    for w in bench.warnings:
        print(f"warning: {w}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
