"""Per-pool work run concurrently with a bound: one slow or stuck pool never delays the others.

The resync and autoscaler loops submit pool keys here instead of awaiting each pool in turn. At
most `limit` pools run at once; each run is cut off after `timeout` seconds; a key submitted
while it is already running runs once more right after (a trigger is never lost, never doubled).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

Key = tuple[str, str]


class PoolTasks:
    """Run `work(key)` per submitted key: bounded concurrency, a timeout per run, errors logged."""

    def __init__(
        self,
        work: Callable[[Key], Awaitable[None]],
        *,
        limit: int,
        timeout: float,
        logger: logging.Logger,
        what: str,
    ) -> None:
        self._work = work
        self._slots = asyncio.Semaphore(limit)
        self._timeout = timeout
        self._log = logger
        self._what = what
        self._running: dict[Key, asyncio.Task[None]] = {}
        self._again: set[Key] = set()

    def submit(self, key: Key) -> None:
        if key in self._running:
            self._again.add(key)
            return
        self._running[key] = asyncio.create_task(self._run(key), name=f"{self._what} {key[0]}/{key[1]}")

    def busy(self, key: Key) -> bool:
        return key in self._running

    async def _run(self, key: Key) -> None:
        try:
            while True:
                async with self._slots:
                    try:
                        await asyncio.wait_for(self._work(key), timeout=self._timeout)
                    except TimeoutError:
                        self._log.error(
                            "%s of %s/%s took over %gs; abandoned, retrying on the next trigger",
                            self._what,
                            *key,
                            self._timeout,
                        )
                    except asyncio.CancelledError:
                        raise
                    except Exception:
                        self._log.exception("%s of %s/%s failed; retrying on the next trigger", self._what, *key)
                if key not in self._again:
                    return
                self._again.discard(key)
        finally:
            self._running.pop(key, None)

    async def drain(self) -> None:
        """Wait for every run in flight (tests, shutdown)."""
        while self._running:
            await asyncio.gather(*list(self._running.values()), return_exceptions=True)

    def cancel(self) -> None:
        for task in list(self._running.values()):
            task.cancel()
