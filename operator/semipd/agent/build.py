"""Build the agent into one self-contained zipapp (`python3 agent.pyz -- <engine command>`).

The archive holds only semipd/agent/*.py plus an empty `semipd` package marker, so it runs on any
python3 >= 3.9 with no site-packages. CLI: `python -m semipd.agent.build [OUT]` (default agent.pyz).
"""

from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path

AGENT_DIR = Path(__file__).resolve().parent
ENTRY = "import sys\nfrom semipd.agent.__main__ import main\nsys.exit(main())\n"
PACKAGE_MARKER = '"""Minimal semipd package marker for the agent zipapp."""\n'

# Fixed timestamp so the same sources give the same archive bytes.
_STAMP = (2024, 1, 1, 0, 0, 0)


def _add(zf: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, _STAMP)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    zf.writestr(info, data)


def agent_sources() -> list[Path]:
    return sorted(p for p in AGENT_DIR.glob("*.py") if p.is_file() and p.name != "build.py")


def build_zipapp(out_path: str | os.PathLike[str]) -> Path:
    """Write the zipapp to `out_path` (shebang `/usr/bin/env python3`, mode 0755) and return its path."""
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(b"#!/usr/bin/env python3\n")
        with zipfile.ZipFile(f, "w") as zf:
            _add(zf, "__main__.py", ENTRY.encode())
            _add(zf, "semipd/__init__.py", PACKAGE_MARKER.encode())
            for src in agent_sources():
                _add(zf, f"semipd/agent/{src.name}", src.read_bytes())
    os.chmod(tmp, 0o755)
    os.replace(tmp, out)
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1 or (args and args[0] in ("-h", "--help")):
        print("usage: python -m semipd.agent.build [OUT.pyz]", file=sys.stderr)
        return 2
    out = build_zipapp(args[0] if args else "agent.pyz")
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
