"""One supervised child process, started in its own session so signals reach its whole process group."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Sequence

from semipd.agent.httpwire import TIMEOUT_ERRORS

log = logging.getLogger("semipd.agent.procs")


def exit_status(returncode: int) -> int:
    """Shell-style exit status: a child killed by signal N reports 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


class ChildProcess:
    def __init__(self, name: str, proc: asyncio.subprocess.Process) -> None:
        self.name = name
        self.proc = proc
        self.expected_exit = False

    @classmethod
    async def start(cls, name: str, argv: Sequence[str], env: dict[str, str]) -> ChildProcess:
        proc = await asyncio.create_subprocess_exec(*argv, env=env, start_new_session=True)
        log.info("started %s pid %d: %s", name, proc.pid, " ".join(argv))
        return cls(name, proc)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    async def wait(self) -> int:
        return await self.proc.wait()

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    async def stop(self, timeout: float) -> int:
        """SIGTERM the group, SIGKILL after `timeout`; also reaps stragglers left in the group."""
        self.expected_exit = True
        if self.returncode is None:
            self.signal_group(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), timeout)
            except TIMEOUT_ERRORS:
                log.warning("%s pid %d ignored SIGTERM for %.1fs; killing", self.name, self.pid, timeout)
                self.signal_group(signal.SIGKILL)
                await self.proc.wait()
        self.signal_group(signal.SIGKILL)
        rc = self.proc.returncode
        assert rc is not None
        return rc
