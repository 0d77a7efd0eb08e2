#!/usr/bin/env bash
# Install the Debian packages the e2e harness needs: util-linux (unshare, nsenter: per-pod mount
# namespaces for the local kubelet). Idempotent and instant when present; runs `apt-get update`
# only when something is missing.
#
# Prometheus is NOT taken from Debian: bookworm's prometheus 2.42 is built without Kubernetes
# service discovery (kubernetes_sd_configs), so build-binaries.sh builds it from the Go proxy.
set -euo pipefail

PACKAGES=(util-linux)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
for tool in unshare nsenter; do
  command -v "$tool" >/dev/null || missing+=(util-linux)
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "[install-deps] all present: ${PACKAGES[*]}"
  exit 0
fi

SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
echo "[install-deps] installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends $(printf '%s\n' "${missing[@]}" | sort -u)
echo "[install-deps] done"
