"""The agent's own Prometheus metrics: the split in force, switch counts and durations, worker restarts,
and the expert placement version in force with rebalance counts."""

from __future__ import annotations

from semipd.agent.promtext import Counter, Gauge, Histogram, Registry

SWITCH_DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


class AgentMetrics:
    def __init__(self, engine: str, switch_mode: str) -> None:
        self.registry = Registry()
        self.info = Gauge("semipd_agent_info", "Engine kind and switch mode of this pod (always 1).")
        self.prefill_share = Gauge("semipd_agent_prefill_share_ratio", "Prefill compute share in force (0-1).")
        self.decode_share = Gauge("semipd_agent_decode_share_ratio", "Decode compute share in force (0-1).")
        self.switches = Counter("semipd_agent_switches_total", "Completed split changes.")
        self.failed_switches = Counter(
            "semipd_agent_failed_switches_total", "Split changes that failed and were rolled back."
        )
        self.switch_duration = Histogram(
            "semipd_agent_switch_duration_seconds",
            "Wall time from accepting a split change to the new split being in force.",
            SWITCH_DURATION_BUCKETS,
        )
        self.worker_restarts = Counter(
            "semipd_agent_worker_restarts_total", "Prefill worker restarts after a crash of the active worker."
        )
        self.switch_in_progress = Gauge("semipd_agent_switch_in_progress", "1 while a split change runs.")
        self.engine_up = Gauge("semipd_agent_engine_up", "1 while the engine is started and serving.")
        self.mps_daemon = Gauge("semipd_agent_mps_daemon_running", "1 if this agent runs the MPS control daemon.")
        self.expert_placement_version = Gauge(
            "semipd_agent_expert_placement_version", "Expert placement version the engine last reported in force."
        )
        self.expert_rebalances = Counter(
            "semipd_agent_expert_rebalances_total", "Expert placements forwarded to the engine and in force."
        )
        self.failed_expert_rebalances = Counter(
            "semipd_agent_failed_expert_rebalances_total", "Expert placements the engine refused or did not apply."
        )
        self.expert_rebalance_in_progress = Gauge(
            "semipd_agent_expert_rebalance_in_progress", "1 while an expert placement is being applied."
        )
        for metric in (
            self.info,
            self.prefill_share,
            self.decode_share,
            self.switches,
            self.failed_switches,
            self.switch_duration,
            self.worker_restarts,
            self.switch_in_progress,
            self.engine_up,
            self.mps_daemon,
            self.expert_placement_version,
            self.expert_rebalances,
            self.failed_expert_rebalances,
            self.expert_rebalance_in_progress,
        ):
            self.registry.add(metric)
        self.info.set(1, engine=engine, switch_mode=switch_mode)
        self.switch_in_progress.set(0)
        self.engine_up.set(0)
        self.mps_daemon.set(0)
        self.expert_rebalance_in_progress.set(0)

    def render(self) -> str:
        return self.registry.render()
