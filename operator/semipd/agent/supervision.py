"""The supervisor's value types: settings, its errors, a prefill worker, a switch's record, and the
crash back-off streak.

Standard library only (the in-pod agent)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from semipd.agent.drivers import Driver, HealthEndpoint
from semipd.agent.procs import ChildProcess
from semipd.agent.split import Split, SplitBounds

STARTING = "starting"
RUNNING = "running"
SWITCHING = "switching"
RESTARTING = "restarting"
DRAINING = "draining"
STOPPED = "stopped"


class SupervisionError(RuntimeError):
    """A process did not come up, died, or the control API refused a step."""


class SwitchFailed(SupervisionError):
    """A split change failed; the previous split is still in force unless the message says otherwise."""


class SwitchRejected(Exception):
    """A split change refused before starting (busy, unsupported, not ready)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Settings:
    driver: Driver
    engine_argv: tuple[str, ...]
    run_dir: str
    initial: Split
    bounds: SplitBounds
    startup_timeout: float = 900.0
    switch_timeout: float = 120.0
    worker_drain_timeout: float = 60.0
    drain_timeout: float = 25.0
    drain_delay: float = 0.0
    stop_timeout: float = 5.0
    restart_drain_seconds: float = 5.0
    restart_drain_timeout: float = 300.0
    """Restart mode: longest wait for the engine's in-flight requests to finish before it is stopped."""
    restart_timeout: float = 900.0
    poll_interval: float = 0.02
    restart_backoff_max: float = 10.0
    mps: str = "auto"
    health: HealthEndpoint | None = None


@dataclass
class Worker:
    id: int
    percent: int
    child: ChildProcess
    recovering: bool = False  # a replacement for this crashed active worker has been started


@dataclass(frozen=True)
class SwitchRecord:
    previous: Split
    target: Split
    duration: float
    finished_at: float

    def to_json(self) -> dict[str, Any]:
        return {
            "from": self.previous.to_json(),
            "to": self.target.to_json(),
            "durationSeconds": round(self.duration, 6),
            "finishedAt": self.finished_at,
        }


CRASH_STREAK_WINDOW = 30.0  # s: a worker crash within this long of the previous one backs off further


@dataclass
class CrashStreak:
    """Active-worker crashes in quick succession: a share whose workers keep dying must not spin."""

    count: int = 0
    last: float = -math.inf
    _before: tuple[int, float, int] | None = field(default=None, compare=False, repr=False)
    """(count, last) before the newest record, and whose crash that was: what forgive() restores."""

    def record(self, worker_id: int) -> int:
        """Count worker `worker_id`'s crash now; the streak (0 for the first in CRASH_STREAK_WINDOW) sets
        the back-off."""
        now = time.monotonic()
        self._before = (self.count, self.last, worker_id)
        self.count = self.count + 1 if now - self.last < CRASH_STREAK_WINDOW else 0
        self.last = now
        return self.count

    def forgive(self, worker_id: int) -> None:
        """Take back worker `worker_id`'s crash: a standby switch rolled back to the old worker, nothing
        restarted. With another crash recorded since, only the count goes back."""
        if self._before is not None and self._before[2] == worker_id:
            self.count, self.last = self._before[:2]
        else:
            self.count = max(0, self.count - 1)
        self._before = None
