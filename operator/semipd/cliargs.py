"""Argparse conventions every `semipd` subcommand shares.

A usage error is one line naming the fix and exits 2 (never a traceback); every flag's help shows
its default; durations read like the CRD's (Go style, `semipd.api.durations`), a bare number being
seconds; `-` as an output path means standard output.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any, NoReturn

from semipd.api.durations import to_seconds

STDOUT = "-"


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps descriptions as written and appends `(default: X)` to every flag that has one."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        # `is`, not `in`: 0 == False, and a default of 0 (a seed) is a default worth showing.
        if "%(default)" in text or not action.option_strings or any(default is v for v in (None, False)):
            return text
        if default == argparse.SUPPRESS:
            return text
        if isinstance(default, list | tuple) and not default:
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line with the fix, exit status 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def fail(prog: str, message: object) -> int:
    """Print a user-input error as one line and return the usage exit status."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        try:
            return to_seconds(value.strip())
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    if not math.isfinite(seconds):
        raise argparse.ArgumentTypeError(f"{value!r} is not a duration like '80ms', '2s' or '1m30s'")
    return seconds


def duration(value: str) -> float:
    """A Go-style duration (`500ms`, `90s`, `5m`, `1h30m`) or a bare number of seconds, >= 0."""
    seconds = _seconds(value)
    if seconds < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value!r}")
    return seconds


def positive_duration(value: str) -> float:
    """Like `duration`, but above zero."""
    seconds = _seconds(value)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value!r}")
    return seconds


def write_output(path: str, text: str) -> None:
    """Write `text` to a file, or to standard output when `path` is `-`."""
    if path == STDOUT:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        Path(path).write_text(text, encoding="utf-8")
