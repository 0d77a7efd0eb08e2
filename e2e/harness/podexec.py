"""Container launcher: run inside a fresh mount namespace (`unshare -m`), bind the pod's volume
directories at their mountPaths, then exec the container's command.

Run by path with `python -I -S podexec.py SPEC.json` (standard library only, no package import)
so it starts fast. Exit codes: 126 if the mounts cannot be set up, 127 if the command is missing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import sys

MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]


def _mount(source: str | None, target: str, flags: int) -> None:
    src = source.encode() if source is not None else None
    if _libc.mount(src, target.encode(), None, flags, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount({source!r}, {target!r}, flags={flags:#x}): {os.strerror(err)}")


def _ensure_target(source: str, target: str) -> None:
    """Create the mount point (a file for file sources) if the host lacks it."""
    if os.path.lexists(target):
        return
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "a"):
            pass


def bind_all(mounts: list[dict[str, object]]) -> None:
    # The namespace is a copy of the host's: make it private first so nothing propagates back.
    _mount(None, "/", MS_REC | MS_PRIVATE)
    for m in mounts:
        source, target = str(m["source"]), str(m["target"])
        _ensure_target(source, target)
        _mount(source, target, MS_BIND | MS_REC)
        if m.get("read_only"):
            _mount(None, target, MS_BIND | MS_REMOUNT | MS_RDONLY)


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    try:
        bind_all(spec["mounts"])
        os.makedirs(spec["cwd"], exist_ok=True)  # runtimes create a missing workingDir too
        os.chdir(spec["cwd"])
    except OSError as exc:
        print(f"local-kubelet: cannot set up container filesystem: {exc}", file=sys.stderr, flush=True)
        os._exit(126)
    argv: list[str] = spec["argv"]
    try:
        os.execvpe(argv[0], argv, spec["env"])
    except OSError as exc:
        print(f"local-kubelet: exec {argv[0]!r}: {exc}", file=sys.stderr, flush=True)
        os._exit(127)


if __name__ == "__main__":
    main()
