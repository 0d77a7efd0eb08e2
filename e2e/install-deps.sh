#!/usr/bin/env bash
# Install the Debian packages the e2e harness needs (Prometheus, util-linux's unshare).
# Idempotent and quick when everything is present; runs `apt-get update` only when a
# package is missing. Never starts the packaged services: the harness runs its own
# Prometheus on 127.0.0.1 with a generated config.
set -euo pipefail

PACKAGES=(prometheus util-linux)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "[install-deps] all present: ${PACKAGES[*]}"
  exit 0
fi

SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
echo "[install-deps] installing: ${missing[*]}"
# A policy-rc.d that denies service starts keeps the package's own prometheus (0.0.0.0:9090)
# from being launched by the maintainer scripts.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
  $SUDO chmod +x "$policy"
  created_policy=1
fi
cleanup() { [ "$created_policy" -eq 1 ] && $SUDO rm -f "$policy"; }
trap cleanup EXIT
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "[install-deps] done"
