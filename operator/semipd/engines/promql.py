"""An engine's Prometheus metric names and bucket edges, and the PromQL the operator asks of them.

Queries are built from the names, so swapping the engine kind swaps the series. Selectors are label
matchers without braces (e.g. `namespace="ml",pod=~"chat-gpu-.*"`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

_WINDOW = re.compile(r"^[1-9][0-9]*(ms|s|m|h|d|w|y)$")


def le_label(bound: float) -> str:
    """A bucket bound as prometheus_client renders the `le` label (0.5 -> "0.5", 1 -> "1.0")."""
    text = repr(float(bound))
    return text if "e" not in text else f"{bound:.12g}"


def _check_window(window: str) -> str:
    if not _WINDOW.match(window):
        raise ValueError(f"bad PromQL range {window!r} (want e.g. 30s, 1m, 5m)")
    return window


def _matchers(*parts: str) -> str:
    inner = ",".join(p for p in parts if p)
    return "{" + inner + "}" if inner else ""


def _by(labels: Sequence[str], extra: str = "") -> str:
    names = [*([extra] if extra else []), *labels]
    return f" by ({', '.join(names)})" if names else ""


@dataclass(frozen=True)
class MetricSet:
    """Series names (histograms by base name; counters with their `_total`) and bucket edges."""

    ttft: str
    """Time-to-first-token histogram."""
    itl: str
    """Inter-token latency histogram (per token or per decode step; never e2e/tokens)."""
    e2e: str
    running: str
    """Gauge: requests being decoded."""
    waiting: str
    """Gauge: requests queued for prefill."""
    kv_usage: str
    """Gauge: KV-cache usage, 0-1."""
    prompt_tokens: str
    generation_tokens: str
    ttft_buckets: tuple[float, ...]
    itl_buckets: tuple[float, ...]
    e2e_buckets: tuple[float, ...]
    model_label: str = "model_name"
    path: str = "/metrics"
    scheme: str = "http"
    extra: Mapping[str, str] = field(default_factory=dict)
    """Engine-specific extras by role, e.g. {"expert_tokens": "..."}."""

    # --- latency -----------------------------------------------------------------------------------

    def _quantile(self, hist: str, q: float, window: str, by: Sequence[str], selector: str) -> str:
        if not 0.0 < q < 1.0:
            raise ValueError(f"quantile must be in (0, 1), got {q}")
        return (
            f"histogram_quantile({q}, sum{_by(by, 'le')} "
            f"(rate({hist}_bucket{_matchers(selector)}[{_check_window(window)}])))"
        )

    def ttft_quantile(self, q: float = 0.99, window: str = "1m", by: Sequence[str] = (), selector: str = "") -> str:
        return self._quantile(self.ttft, q, window, by, selector)

    def itl_quantile(self, q: float = 0.99, window: str = "1m", by: Sequence[str] = (), selector: str = "") -> str:
        return self._quantile(self.itl, q, window, by, selector)

    def e2e_quantile(self, q: float = 0.99, window: str = "1m", by: Sequence[str] = (), selector: str = "") -> str:
        return self._quantile(self.e2e, q, window, by, selector)

    # --- attainment ---------------------------------------------------------------------------------

    @staticmethod
    def bucket_at_or_below(buckets: Sequence[float], threshold_s: float) -> float:
        """The largest bucket bound <= threshold: attainment is exact only on a bound, and rounding down
        never claims attainment that was not measured."""
        below = [b for b in buckets if b <= threshold_s + 1e-12]
        if not below:
            raise ValueError(f"threshold {threshold_s} s is below the smallest bucket bound {min(buckets)} s")
        return max(below)

    def _attainment(
        self, hist: str, buckets: Sequence[float], threshold_s: float, window: str, by: Sequence[str], selector: str
    ) -> str:
        le = 'le="' + le_label(self.bucket_at_or_below(buckets, threshold_s)) + '"'
        w = _check_window(window)
        return (
            f"sum{_by(by)} (rate({hist}_bucket{_matchers(selector, le)}[{w}])) / "
            f"sum{_by(by)} (rate({hist}_count{_matchers(selector)}[{w}]))"
        )

    def ttft_attainment(
        self, threshold_s: float, window: str = "5m", by: Sequence[str] = (), selector: str = ""
    ) -> str:
        """Fraction of requests with TTFT <= threshold (rounded down to a bucket bound)."""
        return self._attainment(self.ttft, self.ttft_buckets, threshold_s, window, by, selector)

    def itl_attainment(self, threshold_s: float, window: str = "5m", by: Sequence[str] = (), selector: str = "") -> str:
        """Fraction of inter-token observations <= threshold (rounded down to a bucket bound)."""
        return self._attainment(self.itl, self.itl_buckets, threshold_s, window, by, selector)

    # --- load ----------------------------------------------------------------------------------------

    def request_rate(self, window: str = "1m", by: Sequence[str] = (), selector: str = "") -> str:
        """Finished requests per second."""
        return f"sum{_by(by)} (rate({self.e2e}_count{_matchers(selector)}[{_check_window(window)}]))"

    def token_rates(self, window: str = "1m", by: Sequence[str] = (), selector: str = "") -> tuple[str, str]:
        """(prompt tokens/s, generated tokens/s)."""
        w, m = _check_window(window), _matchers(selector)
        return (
            f"sum{_by(by)} (rate({self.prompt_tokens}{m}[{w}]))",
            f"sum{_by(by)} (rate({self.generation_tokens}{m}[{w}]))",
        )

    def queue_length(self, by: Sequence[str] = (), selector: str = "") -> str:
        return f"sum{_by(by)} ({self.waiting}{_matchers(selector)})"

    def running_requests(self, by: Sequence[str] = (), selector: str = "") -> str:
        return f"sum{_by(by)} ({self.running}{_matchers(selector)})"

    def kv_usage_max(self, by: Sequence[str] = (), selector: str = "") -> str:
        return f"max{_by(by)} ({self.kv_usage}{_matchers(selector)})"

    def prompt_length_buckets(self, window: str = "1m", selector: str = "") -> str | None:
        """Cumulative rate per `le` bucket of the prompt-length histogram (tokens), summed over pods;
        None when the engine exports no such histogram (`extra["prompt_tokens_histogram"]`)."""
        hist = self.extra.get("prompt_tokens_histogram")
        if hist is None:
            return None
        return f"sum by (le) (rate({hist}_bucket{_matchers(selector)}[{_check_window(window)}]))"

    # --- experts -------------------------------------------------------------------------------------

    def expert_load(self, window: str, selector: str = "") -> str | None:
        """Tokens per (MoE layer, logical expert) over the window, summed over pods; None when the
        engine exports no per-expert counter (only the simulator does; see docs/placement.md)."""
        counter = self.extra.get("expert_tokens_total")
        if counter is None:
            return None
        return f"sum by (layer, expert) (increase({counter}{_matchers(selector)}[{_check_window(window)}]))"
