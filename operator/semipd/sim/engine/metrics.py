"""Prometheus metrics of the simulated engine under SGLang 0.4.4 names and bucket edges (Semi-PD fork).

Also `semipd_sim_*` series that only the simulator has (shares in force, speedup, per-expert token
counters for MoE models and per-device load under the expert map in force, computed at scrape time
from the routed-token total).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from semipd.sim.engine.experts import ExpertPlacement

TTFT_BUCKETS = (0.1, 0.3, 0.5, 0.7, 0.9, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 120, 160)
TPOT_BUCKETS = (
    0.002, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.06,
    0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040,
    0.050, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2,
)  # fmt: skip
E2E_BUCKETS = (0.1, 0.2, 0.4, 0.8, 1, 2, 5, 10, 20, 40, 60, 80, 100, 150, 200, 250, 300, 350, 500, 1000)
PROMPT_TOKENS_BUCKETS = tuple(float(2**k) for k in range(7, 21))
"""128 .. 1Mi tokens in powers of two: every power-of-two long-context threshold falls on a bound."""


class ExpertCollector(Collector):
    """semipd_sim_expert_tokens_total{layer,expert}: routed tokens x per-layer hit probability.

    With a placement (an EP layout over devices): semipd_sim_expert_device_tokens_total{layer,device}
    under the maps in force over time, and the map in force's version, SGLang balancedness (mean over
    layers of mean/max device load) and worst-layer max/mean.
    """

    def __init__(
        self,
        model_name: str,
        hit_probabilities: Sequence[Sequence[float]],
        placement: ExpertPlacement | None = None,
    ) -> None:
        self.model_name = model_name
        self.hits = hit_probabilities
        self.placement = placement
        self.routed_tokens = 0

    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily(
            "semipd_sim_expert_tokens",
            "Tokens routed to each expert of each MoE layer (simulated, skewed).",
            labels=["model_name", "layer", "expert"],
        )
        for layer, probs in enumerate(self.hits):
            for expert, q in enumerate(probs):
                family.add_metric([self.model_name, str(layer), str(expert)], self.routed_tokens * q)
        yield family
        if self.placement is not None:
            yield from self._placement_families(self.placement)

    def _placement_families(self, placement: ExpertPlacement) -> Iterable[Metric]:
        devices = CounterMetricFamily(
            "semipd_sim_expert_device_tokens",
            "Tokens each EP device processed per MoE layer, under the expert map in force at the time.",
            labels=["model_name", "layer", "device"],
        )
        for layer, row in enumerate(placement.device_tokens(self.routed_tokens).tolist()):
            for device, value in enumerate(row):
                devices.add_metric([self.model_name, str(layer), str(device)], value)
        yield devices
        for name, doc, value in (
            (
                "semipd_sim_expert_placement_version",
                "Version of the expert map in force (0: trivial).",
                placement.version,
            ),
            (
                "semipd_sim_expert_balance_ratio",
                "Mean over MoE layers of mean/max device load under the map in force (SGLang's definition).",
                placement.balancedness(),
            ),
            (
                "semipd_sim_expert_max_over_mean",
                "Max/mean device load of the worst MoE layer under the map in force.",
                placement.worst_max_over_mean(),
            ),
        ):
            gauge = GaugeMetricFamily(name, doc, labels=["model_name"])
            gauge.add_metric([self.model_name], float(value))
            yield gauge
        rebalances = CounterMetricFamily(
            "semipd_sim_expert_rebalances", "Expert maps loaded since start-up.", labels=["model_name"]
        )
        rebalances.add_metric([self.model_name], placement.rebalances)
        yield rebalances


class EngineMetrics:
    """The engine's series, bound to their label values once (the hot path only observes)."""

    def __init__(
        self,
        model_name: str,
        hit_probabilities: Sequence[Sequence[float]] | None,
        placement: ExpertPlacement | None = None,
    ) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        gauge_names = ["model_name", "engine_type"]
        gl = (model_name, "unified")

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, gauge_names, registry=r).labels(*gl)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, ["model_name"], registry=r).labels(model_name)

        def histogram(name: str, doc: str, buckets: Sequence[float]) -> Histogram:
            return Histogram(name, doc, ["model_name"], buckets=buckets, registry=r).labels(model_name)

        self.num_running_reqs = gauge("sglang:num_running_reqs", "Running requests")
        self.num_queue_reqs = gauge("sglang:num_queue_reqs", "Queued requests")
        self.num_used_tokens = gauge("sglang:num_used_tokens", "Used KV tokens")
        self.token_usage = gauge("sglang:token_usage", "KV pool usage (0-1)")
        self.gen_throughput = gauge("sglang:gen_throughput", "Generation throughput (tok/s)")
        self.cache_hit_rate = gauge("sglang:cache_hit_rate", "Prefix cache hit rate")
        self.max_total_num_tokens = gauge("sglang:max_total_num_tokens", "KV pool capacity (tokens)")
        self.prompt_tokens = counter("sglang:prompt_tokens", "Prefill tokens processed")
        self.generation_tokens = counter("sglang:generation_tokens", "Generated tokens")
        self.cached_tokens = counter("sglang:cached_tokens", "Prefix-cached prompt tokens")
        self.num_requests = counter("sglang:num_requests", "Finished requests")
        self.ttft = histogram("sglang:time_to_first_token_seconds", "Time to first token", TTFT_BUCKETS)
        self.tpot = histogram(
            "sglang:time_per_output_token_seconds",
            "e2e latency / output tokens (includes TTFT, as SGLang 0.4.4)",
            TPOT_BUCKETS,
        )
        self.itl = histogram("sglang:inter_token_latency_seconds", "Inter-token latency", ITL_BUCKETS)
        self.e2e = histogram("sglang:e2e_request_latency_seconds", "End-to-end request latency", E2E_BUCKETS)
        self.prompt_length = histogram(
            "sglang:prompt_tokens_histogram", "Prompt length (tokens) per prefilled request", PROMPT_TOKENS_BUCKETS
        )
        self.aborted = counter("semipd_sim_aborted_requests", "Requests the client abandoned")
        self.prefill_share = Gauge("semipd_sim_prefill_share_ratio", "Active prefill worker share (0-1)", registry=r)
        self.decode_share = Gauge("semipd_sim_decode_share_ratio", "Decode share in force (0-1)", registry=r)
        self.prefill_workers = Gauge("semipd_sim_prefill_workers", "Attached prefill workers", registry=r)
        self.speedup = Gauge("semipd_sim_speedup", "Simulation speedup (model seconds per wall second)", registry=r)
        self.requeued = Counter("semipd_sim_requeued_requests", "Requests re-prefilled after a worker died", registry=r)
        self.experts: ExpertCollector | None = None
        if hit_probabilities is not None:
            self.experts = ExpertCollector(model_name, hit_probabilities, placement)
            r.register(self.experts)
