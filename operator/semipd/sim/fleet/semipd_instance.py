"""The semi-PD instance of the fleet simulator.

`SemiPDInstance` replays the simulated engine's decode owner (semipd.sim.engine.owner) as events:
FCFS admission into prefill batches under a token budget and KV reservation (the engine's own
`take_prefill_batch` / `KvPool`), prefill at the active worker's share contended by a running decode
batch, a continuous-batching decode loop whose step time is fixed at its start (contended while a
prefill batch is in flight), joiners entering at the next step boundary, and standby-swap split
changes (new prefill worker ready after `switch_cost`, old worker finishes its batch; decode share
applied at a step boundary one more `switch_cost` later). A disaggregated prefill or decode
instance is the same machine with one half missing (`handoff` / decode-only).
"""

from __future__ import annotations

from collections import deque

from semipd.perf import LatencyModel, contended_shares
from semipd.sim.engine.batching import KvPool, take_prefill_batch
from semipd.sim.fleet.instance import Host, Instance, InstanceConfig, State, SwitchMode
from semipd.sim.fleet.metrics import EngineCounters, Gauges
from semipd.sim.fleet.requests import SimRequest


class _Batch:
    __slots__ = ("id", "percent", "requests", "start", "worker")

    def __init__(self, bid: int, worker: int, percent: int, requests: list[SimRequest], start: float) -> None:
        self.id = bid
        self.worker = worker
        self.percent = percent
        self.requests = requests
        self.start = start


class _Switch:
    __slots__ = ("decode", "prefill", "started")

    def __init__(self, prefill: int, decode: int, started: float) -> None:
        self.prefill = prefill
        self.decode = decode
        self.started = started


class SemiPDInstance(Instance):
    """A semi-PD engine pod (decode owner + prefill workers behind the agent)."""

    kind = "semipd"

    def __init__(self, name: str, pool: str, model: LatencyModel, cfg: InstanceConfig, host: Host,
                 counters: EngineCounters, created: float, *, role: str = "serve") -> None:  # fmt: skip
        super().__init__(name, pool, model, cfg, host, counters, created)
        self.role = role
        self.handoff = role == "prefill"
        self.waiting: deque[SimRequest] = deque()
        self.running: set[SimRequest] = set()
        self.joining: list[SimRequest] = []
        self.batches: dict[int, _Batch] = {}
        self.in_batches = 0
        self.awaiting_handoff = 0
        self._next_batch = 0
        self.worker_id = 0
        self.worker_percent = cfg.prefill_percent if role != "prefill" else 100
        self.worker_busy = False
        self.decode_percent = cfg.decode_percent if role != "decode" else 100
        self.pending_decode: int | None = None
        self.stepping = False
        self.steps = 0
        self.finish_at: dict[int, list[SimRequest]] = {}
        self.kv_used = 0
        """KV tokens held by running and joining requests (prompt + generated)."""
        self.step_joined: list[SimRequest] = []
        self.step_batch = 0
        self.step_start = 0.0
        self.epoch = 0
        """Bumped when the engine restarts: events of the previous incarnation are ignored."""
        self.switch: _Switch | None = None
        self.reported = (self.worker_percent, self.decode_percent)
        self._kv_timer: SimRequest | None = None
        """The queue head a KV-wait timeout is armed for."""
        mode = cfg.switch_mode
        if cfg.switch_cost_s is not None:
            self.switch_cost = cfg.switch_cost_s
        else:
            self.switch_cost = model.restart_cost() if mode is SwitchMode.RESTART else model.switch_cost()

    # --- routing ----------------------------------------------------------------------------------

    def kv_need(self, r: SimRequest) -> int:
        # A disaggregated prefill instance holds only the prompt's KV until it is transferred.
        return r.input if self.handoff else r.input + r.output

    def submit(self, r: SimRequest, now: float) -> None:
        r.instance = self
        self.waiting.append(r)
        self.outstanding += r.new_tokens + (0 if self.handoff else r.output)
        self._try_dispatch(now)

    # --- state --------------------------------------------------------------------------------------

    def busy(self) -> int:
        """What max_running counts: requests in prefill batches, decoding, or holding KV for a handoff."""
        return len(self.running) + len(self.joining) + self.in_batches + self.awaiting_handoff

    def held(self) -> int:
        return len(self.waiting) + self.busy()

    def gauges(self) -> Gauges:
        return Gauges(
            len(self.running) + len(self.joining) + self.in_batches, len(self.waiting), self.kv_used / self.kv.capacity
        )

    def split(self) -> tuple[int, int] | None:
        return self.reported if self.cfg.switch_mode is not SwitchMode.NONE else None

    @property
    def switching(self) -> bool:
        return self.switch is not None or self.state is State.RESTARTING

    # --- prefill ------------------------------------------------------------------------------------

    def _try_dispatch(self, now: float) -> None:
        if self.worker_busy or not self.waiting or self.state not in (State.READY, State.DRAINING):
            return
        if self.cfg.kv_wait_s is not None:
            self._reject_kv_waiters(now)
            if not self.waiting:
                return
        slots = self.max_running - self.busy()
        if slots <= 0:
            return
        budget = self.token_budget
        head: list[SimRequest] = []
        tokens = 0
        for r in self.waiting:
            if len(head) >= slots:
                break
            head.append(r)
            tokens += r.new_tokens
            if tokens > budget:
                break  # take_prefill_batch never looks past the first request over the budget
        prompts = [r.new_tokens for r in head]
        needs = [self.kv_need(r) for r in head]
        n = take_prefill_batch(prompts, needs, budget, self.kv.free(), slots)
        if n == 0:
            if self.cfg.kv_wait_s is not None and needs[0] > self.kv.free() and self._kv_timer is not head[0]:
                # The head is blocked on KV: look again when its wait bound runs out.
                self._kv_timer = head[0]
                self.host.at(max(now, head[0].arrival + self.cfg.kv_wait_s), self._kv_timeout, head[0])
            return
        batch = [self.waiting.popleft() for _ in range(n)]
        cached = False
        for r, need in zip(batch, needs, strict=False):
            self.kv.reserve(need)
            r.dispatch = now
            if r.cached:
                cached = True
            if self.prefix is not None and r.hash_ids:
                self.prefix.insert(r.hash_ids)
        x = self.worker_percent / 100.0
        decoding = bool(self.running or self.joining)
        share = contended_shares(x, self.decode_percent / 100.0)[0] if decoding else x
        prefix = [r.cached for r in batch] if cached else None
        duration = self.model.prefill_time(prompts[:n], share, prefix)
        bid = self._next_batch
        self._next_batch += 1
        b = _Batch(bid, self.worker_id, self.worker_percent, batch, now)
        self.batches[bid] = b
        self.in_batches += n
        self.worker_busy = True
        self.host.at(now + duration, self._prefill_done, b)

    def _kv_timeout(self, r: SimRequest, now: float) -> None:
        if self._kv_timer is r:
            self._kv_timer = None
        if self.waiting and self.waiting[0] is r and self.state in (State.READY, State.DRAINING):
            self._reject_kv_waiters(now)
            self._try_dispatch(now)
            self._check_drained(now)

    def _reject_kv_waiters(self, now: float) -> None:
        """FCFS head blocked on KV past the bound: reject it, and the next one that is in the same state."""
        limit = self.cfg.kv_wait_s
        assert limit is not None
        while self.waiting:
            r = self.waiting[0]
            if now - r.arrival < limit - 1e-9 or self.kv_need(r) <= self.kv.free():  # the timer may land 1 ulp early
                return
            self.waiting.popleft()
            self.outstanding -= r.new_tokens + (0 if self.handoff else r.output)
            self.host.dropped(r, now, "kv-wait")

    def _prefill_done(self, b: _Batch, now: float) -> None:
        if self.state is State.GONE or b.id not in self.batches:
            return
        if b.worker == self.worker_id:
            self.worker_busy = False
        del self.batches[b.id]
        self.in_batches -= len(b.requests)
        c = self.counters
        exec_s = now - b.start
        for r in b.requests:
            r.prefill_exec = exec_s
            r.first_token = now
            c.prompt_tokens += r.input
            c.ttft.observe(now - r.arrival)
            self.outstanding -= r.new_tokens + (0 if self.handoff else 1)
            if r.output <= 1:
                self._finish(r, now)  # the first token was the last: nothing to decode or transfer
            elif self.handoff:
                self.awaiting_handoff += 1
                self.host.handoff(r, self, now)
            else:
                self.joining.append(r)
                self.kv_used += r.input + 1
        # The engine's decode loop wakes before its dispatch loop: the step starts uncontended by the
        # batch that just finished, the next batch then sees the running decode.
        if not self.stepping and self.joining:
            self._start_step(now)
        self._try_dispatch(now)
        if self.switch is not None:
            self._switch_drain_check(now)
        self._check_drained(now)

    def release_handoff(self, r: SimRequest, now: float) -> None:
        """The request's KV reached its decode instance: free it here."""
        self.kv.release(self.kv_need(r))
        self.awaiting_handoff -= 1
        self._try_dispatch(now)
        self._check_drained(now)

    # --- decode -------------------------------------------------------------------------------------

    def accept_decode(self, r: SimRequest, now: float) -> None:
        """A transferred request joins this decode instance (KV reserved by `reserve_decode`)."""
        r.instance = self
        self.joining.append(r)
        self.kv_used += r.input + 1
        self.outstanding += r.output - 1
        if not self.stepping:
            self._start_step(now)

    def can_take_decode(self, r: SimRequest) -> bool:
        return self.accepting and self.busy() < self.max_running and self.kv.free() >= r.input + r.output

    def reserve_decode(self, r: SimRequest) -> None:
        self.kv.reserve(r.input + r.output)
        self.awaiting_handoff += 1

    def transfer_arrived(self, r: SimRequest, now: float) -> None:
        self.awaiting_handoff -= 1
        self.accept_decode(r, now)

    def _start_step(self, now: float) -> None:
        if self.pending_decode is not None:
            self._apply_decode(now)
        if not self.running and not self.joining:
            self.stepping = False
            return
        self.stepping = True
        joined = self.joining
        if joined:
            self.running.update(joined)
            self.joining = []
            steps = self.steps - 1
            finish_at = self.finish_at
            for r in joined:
                key = steps + r.output
                lst = finish_at.get(key)
                if lst is None:
                    finish_at[key] = [r]
                else:
                    lst.append(r)
        self.step_joined = joined
        n = len(self.running)
        self.step_batch = n
        self.step_start = now
        share = self.decode_percent / 100.0
        contended = bool(self.batches)
        if contended:
            prefill = max(b.percent for b in self.batches.values())
            share = contended_shares(prefill / 100.0, share)[1]
        self.host.at(now + self.model.decode_step_time(n, self.kv_used, share, contended), self._step_done, self.epoch)

    def _step_done(self, epoch: int, now: float) -> None:
        if epoch != self.epoch:
            return
        self.steps += 1
        n = self.step_batch
        joined = self.step_joined
        c = self.counters
        old = n
        if joined:
            old -= len(joined)
            for r in joined:
                c.observe_itl(now - r.first_token)
        if old:
            c.observe_itl_many(now - self.step_start, old)
        self.kv_used += n
        self.outstanding -= n
        done = self.finish_at.pop(self.steps, None)
        if done:
            running = self.running
            for r in done:
                running.discard(r)
                self.kv_used -= r.input + r.output
                self._finish(r, now)
        self._start_step(now)
        if done:
            self._try_dispatch(now)
            self._check_drained(now)

    # --- split changes ------------------------------------------------------------------------------

    def request_split(self, prefill: int, decode: int, now: float) -> str | None:
        mode = self.cfg.switch_mode
        if mode is SwitchMode.NONE:
            return "this engine has no prefill/decode split"
        if self.state is not State.READY:
            return f"pod is {self.state.value}"
        if self.switch is not None:
            return "a split change is already in progress"
        if not (1 <= prefill <= 100 and 1 <= decode <= 100):
            return f"split {prefill}/{decode} out of 1..100"
        if (prefill, decode) == self.reported:
            return None
        self.switch = _Switch(prefill, decode, now)
        if mode is SwitchMode.RESTART:
            self._restart(now)
        elif prefill != self.worker_percent:
            self.host.at(now + self.switch_cost, self._switch_prefill_ready, self.switch)
        else:
            self._switch_decode_begin(now)
        return None

    def _switch_prefill_ready(self, sw: _Switch, now: float) -> None:
        if self.state is State.GONE or self.switch is not sw:
            return
        # Activation: new batches go to the new worker; the old one finishes its in-flight batch.
        self.worker_id += 1
        self.worker_percent = sw.prefill
        self.worker_busy = False
        self._try_dispatch(now)
        if sw.decode != self.decode_percent:
            self._switch_decode_begin(now)
        else:
            self._switch_drain_check(now)

    def _switch_decode_begin(self, now: float) -> None:
        assert self.switch is not None
        self.host.at(now + self.switch_cost, self._switch_decode_set, self.switch)

    def _switch_decode_set(self, sw: _Switch, now: float) -> None:
        if self.state is State.GONE or self.switch is not sw:
            return
        self.pending_decode = sw.decode
        if not self.stepping:
            self._apply_decode(now)

    def _apply_decode(self, now: float) -> None:
        assert self.pending_decode is not None
        self.decode_percent = self.pending_decode
        self.pending_decode = None
        self._switch_drain_check(now)

    def _switch_drain_check(self, now: float) -> None:
        sw = self.switch
        if sw is None or self.pending_decode is not None:
            return
        if self.worker_percent != sw.prefill or self.decode_percent != sw.decode:
            return
        if any(b.worker != self.worker_id for b in self.batches.values()):
            return  # the old worker still runs its last batch
        self.switch = None
        self.reported = (sw.prefill, sw.decode)
        self.host.split_done(self, now)

    def _restart(self, now: float) -> None:
        """Restart-mode switch: the engine relaunches with the new split; whatever it held is lost."""
        assert self.role == "serve", "only co-located semi-PD pods restart to change a split"
        for r in self._drop_all():
            self.host.dropped(r, now, "restart")
        self.state = State.RESTARTING
        self.host.at(now + self.switch_cost, self._restarted, self.switch)

    def _restarted(self, sw: _Switch, now: float) -> None:
        if self.state is not State.RESTARTING or self.switch is not sw:
            return
        self.state = State.READY
        self.worker_percent, self.decode_percent = sw.prefill, sw.decode
        self.switch = None
        self.reported = (sw.prefill, sw.decode)
        self.host.split_done(self, now)

    def _drop_all(self) -> list[SimRequest]:
        lost = list(self.waiting) + list(self.running) + list(self.joining)
        for b in self.batches.values():
            lost.extend(b.requests)
        self.waiting.clear()
        self.running.clear()
        self.joining.clear()
        self.batches.clear()
        self.in_batches = 0
        self.finish_at.clear()
        self.kv = KvPool(self.kv.capacity)
        self.kv_used = 0
        self.outstanding = 0
        self.worker_busy = False
        self.stepping = False
        self.pending_decode = None
        self.epoch += 1
        return lost
