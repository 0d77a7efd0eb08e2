"""A one-line progress bar on stderr for long load runs (standard library only)."""

from __future__ import annotations

import sys
from typing import TextIO

from semipd.load.runner import Progress


def render(p: Progress, width: int = 30) -> str:
    frac = p.done / p.total if p.total else 1.0
    filled = round(frac * width)
    bar = "#" * filled + "-" * (width - filled)
    return f"[{bar}] {p.done}/{p.total} done  {p.in_flight} in flight  {p.failed} failed  {p.elapsed_s:.0f} s"


class ProgressBar:
    """Redraws one stderr line; prints a final newline on close."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._drawn = False

    def __call__(self, p: Progress) -> None:
        self._stream.write("\r" + render(p))
        self._stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self._drawn:
            self._stream.write("\n")
            self._stream.flush()


def wanted(flag: bool | None, stream: TextIO | None = None) -> bool:
    """--progress forces it on, --no-progress off; by default only when stderr is a terminal."""
    if flag is not None:
        return flag
    s = stream if stream is not None else sys.stderr
    return s.isatty()
