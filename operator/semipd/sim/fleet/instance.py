"""Simulated engine instances: the lifecycle, KV pool and counters every kind shares (`Instance`), the
settings of a pool's instances, and what an instance needs from the simulator (`Host`). The semi-PD
instance is in semipd_instance.py, the co-located one in baselines/colocated.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

from semipd.perf import LatencyModel
from semipd.sim.engine.batching import KvPool
from semipd.sim.fleet.metrics import EngineCounters, Gauges
from semipd.sim.fleet.prefix import PrefixCache
from semipd.sim.fleet.requests import SimRequest

if TYPE_CHECKING:
    from semipd.sim.fleet.semipd_instance import SemiPDInstance


class State(Enum):
    PENDING = "pending"
    """Created, not scheduled (no room in the node pool): holds no accelerator."""
    STARTING = "starting"
    READY = "ready"
    RESTARTING = "restarting"
    DRAINING = "draining"
    GONE = "gone"


class SwitchMode(Enum):
    STANDBY_SWAP = "standby_swap"
    RESTART = "restart"
    NONE = "none"


class Host(Protocol):
    """What an instance needs from the simulator."""

    def at(self, t: float, fn: Callable[[Any, float], None], arg: Any) -> None: ...

    def finished(self, r: SimRequest, now: float) -> None: ...

    def dropped(self, r: SimRequest, now: float, reason: str) -> None: ...

    def handoff(self, r: SimRequest, source: SemiPDInstance, now: float) -> None: ...

    def drained(self, inst: Instance, now: float) -> None: ...

    def split_done(self, inst: Instance, now: float) -> None: ...


@dataclass(frozen=True)
class InstanceConfig:
    """Engine settings of one pool's instances (the simulated engine's flags and the agent's switch)."""

    max_running: int = 256
    token_budget: int | None = None
    """Prefill batch token budget (chunked_prefill_size); None: the latency model's default."""
    kv_capacity: int | None = None
    context_length: int | None = None
    prefill_percent: int = 80
    decode_percent: int = 100
    switch_mode: SwitchMode = SwitchMode.STANDBY_SWAP
    switch_cost_s: float | None = None
    """None: LatencyModel.switch_cost() (standby swap) / restart_cost() (restart)."""
    prefix_cache_blocks: int | None = None
    """None: no prefix cache. Blocks of 512 tokens."""
    chunk_tokens: int = 1024
    """Co-located chunked prefill: max_num_batched_tokens per iteration (vLLM-S in the Semi-PD paper)."""
    chunked: bool = True
    """Co-located: chunked prefill (vLLM-S) or prefill-first whole prompts (vLLM-D)."""
    kv_wait_s: float | None = None
    """A queued request whose KV does not fit is rejected ("kv-wait") once it has waited this long at
    the head of the queue (a client or gateway timeout); None: it waits forever."""


class Instance:
    """Lifecycle, KV pool, counters and routing load shared by every instance kind."""

    kind = "instance"
    role = "serve"
    """serve (takes arrivals and decodes), prefill (takes arrivals, hands off) or decode (takes handoffs)."""

    def __init__(self, name: str, pool: str, model: LatencyModel, cfg: InstanceConfig, host: Host,
                 counters: EngineCounters, created: float) -> None:  # fmt: skip
        self.name = name
        self.pool = pool
        self.model = model
        self.cfg = cfg
        self.host = host
        self.counters = counters
        self.created = created
        self.scheduled_at = math.nan
        self.ready_at = math.nan
        self.removed_at = math.nan
        self.state = State.PENDING
        capacity = cfg.kv_capacity or model.kv_capacity_tokens()
        self.kv = KvPool(capacity)
        self.context_length = cfg.context_length or model.model.max_context
        self.token_budget = cfg.token_budget or model.max_batch_tokens
        self.max_running = cfg.max_running
        self.prefix = PrefixCache(cfg.prefix_cache_blocks) if cfg.prefix_cache_blocks else None
        self.outstanding = 0
        """Prompt tokens still to compute plus output tokens still to generate (router load)."""
        self.finished_log: list[SimRequest] = []
        """Requests this instance finished, in order (in-process windows of Semi-PD's controllers)."""

    # --- routing ----------------------------------------------------------------------------------

    @property
    def accepting(self) -> bool:
        return self.state is State.READY

    def admissible(self, r: SimRequest) -> str:
        """ "" if the engine would take the request, else why it answers 400."""
        if r.input + r.output > self.context_length:
            return "context"
        if self.kv_need(r) > self.kv.capacity:
            return "kv"
        return ""

    def kv_need(self, r: SimRequest) -> int:
        return r.input + r.output

    def submit(self, r: SimRequest, now: float) -> None:
        raise NotImplementedError

    # --- state --------------------------------------------------------------------------------------

    def held(self) -> int:
        """Requests on this instance (queued, prefilling, decoding, awaiting handoff)."""
        raise NotImplementedError

    def gauges(self) -> Gauges:
        raise NotImplementedError

    def split(self) -> tuple[int, int] | None:
        """The split the agent reports (None: the engine has no split)."""
        return None

    @property
    def switching(self) -> bool:
        return False

    def request_split(self, prefill: int, decode: int, now: float) -> str | None:
        """Start a split change; an error string if refused."""
        return "this engine has no prefill/decode split"

    # --- lifecycle ----------------------------------------------------------------------------------

    def become_ready(self, now: float) -> None:
        if self.state is State.STARTING:
            self.state = State.READY
            self.ready_at = now

    def drain(self, now: float) -> None:
        """Stop taking requests; the simulator removes the instance once it holds none."""
        if self.state in (State.GONE, State.DRAINING):
            return
        self.state = State.DRAINING
        self._check_drained(now)

    def _finish(self, r: SimRequest, now: float) -> None:
        self.kv.release(self.kv_need(r))
        r.finish = now
        c = self.counters
        c.finished += 1
        c.generation_tokens += r.output
        self.finished_log.append(r)
        self.host.finished(r, now)

    def _check_drained(self, now: float) -> None:
        if self.state is State.DRAINING and self.held() == 0:
            self.state = State.GONE
            self.host.drained(self, now)
