"""Timeline plot of one run: latency percentiles, splits and replicas over time (matplotlib, Agg)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

from semipd.sim.fleet.results import RunResult


def _series(values: Sequence[float | None]) -> list[float]:
    return [float("nan") if v is None else v for v in values]


def plot_timeline(result: RunResult, path: str | Path | BinaryIO, title: str | None = None) -> None:
    """Draw the run's timeline as PNG into a file path or a binary stream (`--plot -`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tl = result.timeline
    t = [s.time / 60.0 for s in tl]
    fig, axes = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    ax = axes[0]
    ax.plot(t, _series([s.ttft_p99 for s in tl]), label="TTFT p99", color="tab:red")
    ax.plot(t, _series([s.ttft_p50 for s in tl]), label="TTFT p50", color="tab:orange")
    ax.axhline(result.ttft_slo_s, color="tab:red", linestyle="--", linewidth=0.8, label="TTFT SLO")
    ax.set_yscale("log")
    ax.set_ylabel("TTFT (s)")
    ax2 = ax.twinx()
    ax2.plot(t, _series([s.tpot_p99 for s in tl]), label="TPOT p99", color="tab:blue")
    ax2.plot(t, _series([s.itl_p99_prom for s in tl]), label="ITL p99 (Prometheus)", color="tab:cyan")
    ax2.axhline(result.itl_slo_s, color="tab:blue", linestyle="--", linewidth=0.8, label="ITL SLO")
    ax2.set_ylabel("TPOT / ITL (s)")
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="upper left", fontsize=7, ncol=3)
    ax.set_title(title or f"{result.name}: attainment {result.attainment:.1%}")

    ax = axes[1]
    names = sorted({n for s in tl for n in s.splits})
    for name in names:
        ax.plot(t, [s.splits[name][0] if name in s.splits else float("nan") for s in tl], linewidth=0.8)
    decode = [min((v[1] for v in s.splits.values()), default=float("nan")) for s in tl]
    if names:
        ax.plot(t, decode, color="black", linestyle=":", label="decode % (min)")
        ax.legend(loc="lower left", fontsize=7)
    ax.set_ylabel("prefill % per pod")
    ax.set_ylim(0, 105)

    ax = axes[2]
    pools = sorted({p for s in tl for p in s.replicas})
    for pool in pools:
        ax.step(t, [s.replicas.get(pool, (0, 0, 0))[2] for s in tl], where="post", label=f"{pool} ready")
        ax.step(t, [s.replicas.get(pool, (0, 0, 0))[0] for s in tl], where="post", linestyle="--",
                linewidth=0.8, label=f"{pool} desired")  # fmt: skip
    ax.set_ylabel("replicas")
    ax.set_xlabel("time (min)")
    ax3 = ax.twinx()
    ax3.plot(t, [s.arrival_rate for s in tl], color="grey", alpha=0.5, linewidth=0.8, label="arrivals/s")
    ax3.set_ylabel("arrivals/s")
    h1, l1 = ax.get_legend_handles_labels()
    h3, l3 = ax3.get_legend_handles_labels()
    ax.legend(h1 + h3, l1 + l3, loc="upper left", fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(Path(path) if isinstance(path, str | Path) else path, dpi=110, format="png")
    plt.close(fig)
