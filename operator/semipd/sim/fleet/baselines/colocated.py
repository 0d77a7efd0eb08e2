"""Co-located vLLM-style instances: prefill and decode interleaved in one process, no split.

Two schedulers, as the Semi-PD paper's vLLM baselines:
- chunked (vLLM-S): every iteration carries all running decodes (one token each) plus prefill chunks
  filling the rest of `chunk_tokens`, FCFS; a prompt's first token comes when its last chunk ends;
- prefill-first (vLLM-D): an iteration is either a whole-prompt prefill batch (decodes stall) or a
  decode step; queued prefills go first.
A mixed iteration's time is the prefill chunk's time plus the decode part's extra over one weight
read (weights are read once per forward pass; decodes add their KV reads and per-sequence costs) —
this is the interference: decode tokens wait for the chunk. KV is reserved per request at admission
(prompt + output), as in the semi-PD instance, so both see the same memory policy.
"""

from __future__ import annotations

from collections import deque

from semipd.perf import LatencyModel
from semipd.sim.fleet.instance import Host, Instance, InstanceConfig, State
from semipd.sim.fleet.metrics import EngineCounters, Gauges
from semipd.sim.fleet.requests import SimRequest


class _Prefill:
    __slots__ = ("done", "r")

    def __init__(self, r: SimRequest) -> None:
        self.r = r
        self.done = 0
        """Prompt tokens (beyond the cached prefix) already computed."""


class ColocatedInstance(Instance):
    kind = "colocated"

    def __init__(self, name: str, pool: str, model: LatencyModel, cfg: InstanceConfig, host: Host,
                 counters: EngineCounters, created: float) -> None:  # fmt: skip
        super().__init__(name, pool, model, cfg, host, counters, created)
        self.chunked = cfg.chunked
        # vLLM without chunked prefill batches whole prompts up to max(max_model_len, 2048) tokens.
        self.budget = cfg.chunk_tokens if cfg.chunked else max(self.context_length, 2048)
        self.waiting: deque[SimRequest] = deque()
        self.prefilling: list[_Prefill] = []
        self.running: set[SimRequest] = set()
        self.fresh: list[SimRequest] = []
        """Running requests that have not had a decode token yet (their first ITL starts at TTFT)."""
        self.finish_at: dict[int, list[SimRequest]] = {}
        self.decode_iters = 0
        self.kv_used = 0
        self.iterating = False
        self.iter_start = 0.0
        self.iter_decodes = 0
        self.iter_chunks: list[tuple[_Prefill, int]] = []
        self.last_decode = 0.0
        """When the previous decode token batch came out (prefill-first iterations in between stall it)."""
        self._weights_step = model.decode_step_time(1, 0, 1.0)

    def submit(self, r: SimRequest, now: float) -> None:
        r.instance = self
        self.waiting.append(r)
        self.outstanding += r.new_tokens + r.output
        if not self.iterating:
            self._iterate(now)

    def held(self) -> int:
        return len(self.waiting) + len(self.prefilling) + len(self.running)

    def gauges(self) -> Gauges:
        return Gauges(len(self.prefilling) + len(self.running), len(self.waiting), self.kv_used / self.kv.capacity)

    def _admit(self, now: float) -> None:
        """Move queue heads into prefill while slots and KV allow (FCFS, no overtaking)."""
        while self.waiting:
            if len(self.prefilling) + len(self.running) >= self.max_running:
                return
            r = self.waiting[0]
            need = r.input + r.output
            if need > self.kv.free():
                return
            self.waiting.popleft()
            self.kv.reserve(need)
            r.dispatch = now
            if self.prefix is not None and r.hash_ids:
                self.prefix.insert(r.hash_ids)
            self.prefilling.append(_Prefill(r))

    def _iterate(self, now: float) -> None:
        if self.state not in (State.READY, State.DRAINING):
            self.iterating = False
            return
        self._admit(now)
        b = len(self.running)
        chunks: list[tuple[_Prefill, int]] = []
        if self.chunked:
            room = self.budget - b
            for p in self.prefilling:
                if room <= 0:
                    break
                take = min(p.r.new_tokens - p.done, room)
                room -= take
                chunks.append((p, take))
        elif self.prefilling:
            tokens = 0
            for p in self.prefilling:
                if chunks and tokens + p.r.new_tokens > self.budget:
                    break
                tokens += p.r.new_tokens
                chunks.append((p, p.r.new_tokens))
            b = 0  # prefill-first: the decodes wait for this batch
        if not chunks and b == 0:
            self.iterating = False
            return
        self.iterating = True
        if chunks:
            lens = [take for _, take in chunks]
            prefix = [p.r.cached + p.done for p, _ in chunks]
            duration = self.model.prefill_time(lens, 1.0, prefix if any(prefix) else None)
            if b:
                duration += max(0.0, self.model.decode_step_time(b, self.kv_used, 1.0) - self._weights_step)
        else:
            duration = self.model.decode_step_time(b, self.kv_used, 1.0)
        self.iter_start = now
        self.iter_decodes = b
        self.iter_chunks = chunks
        self.host.at(now + duration, self._iteration_done, None)

    def _iteration_done(self, _: None, now: float) -> None:
        c = self.counters
        b = self.iter_decodes
        if b:
            self.decode_iters += 1
            old = b - len(self.fresh)
            for r in self.fresh:
                c.observe_itl(now - r.first_token)
            self.fresh = []
            if old:
                c.observe_itl_many(now - self.last_decode, old)
            self.last_decode = now
            self.kv_used += b
            self.outstanding -= b
            done = self.finish_at.pop(self.decode_iters, None)
            if done:
                for r in done:
                    self.running.discard(r)
                    self.kv_used -= r.input + r.output
                    self._finish(r, now)
        completed = False
        exec_s = now - self.iter_start
        for p, take in self.iter_chunks:
            self.outstanding -= take
            p.done += take
            if p.done < p.r.new_tokens:
                continue
            completed = True
            r = p.r
            r.prefill_exec = exec_s
            r.first_token = now
            c.prompt_tokens += r.input
            c.ttft.observe(now - r.arrival)
            self.outstanding -= 1
            if r.output <= 1:
                self._finish(r, now)
                continue
            # Joins the decode batch from the next iteration on.
            self.running.add(r)
            self.fresh.append(r)
            self.kv_used += r.input + 1
            key = self.decode_iters - 1 + r.output
            lst = self.finish_at.get(key)
            if lst is None:
                self.finish_at[key] = [r]
            else:
                lst.append(r)
        if completed:
            self.prefilling = [p for p in self.prefilling if p.done < p.r.new_tokens]
        self.iter_chunks = []
        self._iterate(now)
        self._check_drained(now)
