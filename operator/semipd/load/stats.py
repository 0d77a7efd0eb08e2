"""Per-request load results and their summary: latency quantiles, SLO attainment, goodput.

Pure functions over finished results; the runner produces RequestResult records, and tests and the CLI
summarize them here.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Status = Literal["ok", "http_error", "error", "timeout", "truncated", "cancelled"]


@dataclass(frozen=True, slots=True)
class RequestResult:
    """What happened to one request. Times are seconds; `*_at_s` are offsets from the run start."""

    index: int
    endpoint: str
    scheduled_at_s: float
    """When the schedule said to send it."""
    sent_at_s: float
    """When it was sent (later than scheduled if the concurrency bound held it back)."""
    input_tokens: int
    max_tokens: int
    status: Status
    output_tokens: int = 0
    ttft_s: float | None = None
    """Send to first streamed token."""
    e2e_s: float | None = None
    """Send to end of stream."""
    itl_s: tuple[float, ...] = ()
    """Gaps between consecutive streamed chunks (one token per chunk on SGLang/vLLM defaults)."""
    http_status: int | None = None
    error: str | None = None

    @property
    def client_queue_s(self) -> float:
        return self.sent_at_s - self.scheduled_at_s

    @property
    def tpot_s(self) -> float | None:
        """Mean time per output token after the first, (e2e - ttft) / (tokens - 1)."""
        if self.ttft_s is None or self.e2e_s is None or self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["itl_s"] = list(self.itl_s)
        d["tpot_s"] = self.tpot_s
        return d


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default) of already sorted values."""
    if not sorted_values:
        raise ValueError("quantile of no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q}")
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


@dataclass(frozen=True, slots=True)
class Distribution:
    count: int
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None

    @classmethod
    def of(cls, values: Iterable[float]) -> Distribution:
        ordered = sorted(values)
        if not ordered:
            return cls(0)
        return cls(
            count=len(ordered),
            mean=math.fsum(ordered) / len(ordered),
            p50=quantile(ordered, 0.5),
            p90=quantile(ordered, 0.9),
            p99=quantile(ordered, 0.99),
            max=ordered[-1],
        )


@dataclass(frozen=True, slots=True)
class SLO:
    """A request meets the SLO when its TTFT <= ttft_s and its mean inter-token time (TPOT) <= itl_s."""

    ttft_s: float | None = None
    itl_s: float | None = None

    def ttft_ok(self, r: RequestResult) -> bool:
        return r.status == "ok" and (self.ttft_s is None or (r.ttft_s is not None and r.ttft_s <= self.ttft_s))

    def itl_ok(self, r: RequestResult) -> bool:
        if r.status != "ok":
            return False
        tpot = r.tpot_s
        # A one-token answer has no inter-token time to violate.
        return self.itl_s is None or tpot is None or tpot <= self.itl_s


@dataclass(frozen=True, slots=True)
class Summary:
    requests: int
    ok: int
    errors: dict[str, int]
    duration_s: float
    throughput_rps: float
    """Successful requests per second of run time."""
    output_tokens_per_s: float
    ttft: Distribution
    itl: Distribution
    """Pooled over every streamed chunk gap of successful requests."""
    tpot: Distribution
    """Per successful request."""
    e2e: Distribution
    client_queue: Distribution
    slo: SLO = field(default_factory=SLO)
    ttft_attainment: float | None = None
    """Fractions of ALL requests (failed ones count as misses)."""
    itl_attainment: float | None = None
    slo_attainment: float | None = None
    goodput_rps: float | None = None
    """Requests per second that succeeded and met both SLOs."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def summarize(results: Sequence[RequestResult], duration_s: float, slo: SLO | None = None) -> Summary:
    slo = slo or SLO()
    ok = [r for r in results if r.status == "ok"]
    errors: dict[str, int] = dict(Counter(str(r.status) for r in results if r.status != "ok"))
    n = len(results)
    span = duration_s if duration_s > 0 else math.nan
    with_slo = slo.ttft_s is not None or slo.itl_s is not None
    ttft_hits = sum(1 for r in results if slo.ttft_ok(r))
    itl_hits = sum(1 for r in results if slo.itl_ok(r))
    both = sum(1 for r in results if slo.ttft_ok(r) and slo.itl_ok(r))
    return Summary(
        requests=n,
        ok=len(ok),
        errors=errors,
        duration_s=duration_s,
        throughput_rps=len(ok) / span,
        output_tokens_per_s=sum(r.output_tokens for r in ok) / span,
        ttft=Distribution.of(r.ttft_s for r in ok if r.ttft_s is not None),
        itl=Distribution.of(g for r in ok for g in r.itl_s),
        tpot=Distribution.of(t for r in ok if (t := r.tpot_s) is not None),
        e2e=Distribution.of(r.e2e_s for r in ok if r.e2e_s is not None),
        client_queue=Distribution.of(r.client_queue_s for r in results),
        slo=slo,
        ttft_attainment=(ttft_hits / n if n else None) if slo.ttft_s is not None else None,
        itl_attainment=(itl_hits / n if n else None) if slo.itl_s is not None else None,
        slo_attainment=(both / n if n else None) if with_slo else None,
        goodput_rps=both / span if with_slo else None,
    )


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1e3:.1f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.1f} %"


def format_summary(s: Summary) -> str:
    """Human-readable summary table."""
    lines = [
        f"requests {s.requests}  ok {s.ok}  errors {s.errors or 0}  duration {s.duration_s:.1f} s",
        f"throughput {s.throughput_rps:.2f} req/s  output {s.output_tokens_per_s:.0f} tok/s",
        f"{'ms':<14}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}{'max':>10}",
    ]
    for label, d in (
        ("TTFT", s.ttft),
        ("ITL (chunks)", s.itl),
        ("TPOT (req)", s.tpot),
        ("E2E", s.e2e),
        ("client queue", s.client_queue),
    ):
        lines.append(f"{label:<14}{_ms(d.mean):>10}{_ms(d.p50):>10}{_ms(d.p90):>10}{_ms(d.p99):>10}{_ms(d.max):>10}")
    if s.slo_attainment is not None:
        lines.append(
            f"SLO ttft<={_ms(s.slo.ttft_s)} ms: {_pct(s.ttft_attainment)}  itl<={_ms(s.slo.itl_s)} ms: "
            f"{_pct(s.itl_attainment)}  both: {_pct(s.slo_attainment)}  goodput {s.goodput_rps or 0.0:.2f} req/s"
        )
    return "\n".join(lines)
