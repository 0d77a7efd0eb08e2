"""A request inside the simulated engine: its parsed generation, KV reservation and token stream."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from semipd.sim.engine.openai import GenerationRequest

FINISHED = -1


@dataclass(eq=False)
class SimRequest:
    rid: str
    gen: GenerationRequest
    arrival: float
    events: asyncio.Queue[int] = field(default_factory=asyncio.Queue)
    kv_reserved: bool = False
    generated: int = 0
    last_token_at: float = 0.0
    aborted: bool = False
    waiting: bool = True

    @property
    def kv_need(self) -> int:
        return self.gen.prompt_tokens + self.gen.max_tokens

    @property
    def kv_used(self) -> int:
        return self.gen.prompt_tokens + self.generated
