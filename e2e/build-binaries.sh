#!/usr/bin/env bash
# Build the real control-plane binaries (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, kwok, prometheus, promtool) from the Go module proxy into a cache outside the repo.
# Only what is missing (or has the wrong version) is built; a warm run takes seconds.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-1.35.4}
ETCD_VERSION=${ETCD_VERSION:-3.6.16}
KWOK_VERSION=${KWOK_VERSION:-0.8.0}
HELM_VERSION=${HELM_VERSION:-3.21.4}
# Prometheus 3.x is published to the Go proxy as module versions v0.3XX.Y (3.16.0 = v0.316.0).
PROMETHEUS_VERSION=${PROMETHEUS_VERSION:-3.16.0}
CACHE=${SEMIPD_CACHE:-$HOME/.cache/semipd}
BIN=$CACHE/bin
BUILD=$CACHE/build
mkdir -p "$BIN" "$BUILD"

export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0 GOFLAGS=${GOFLAGS:--p=2}
export GOPROXY=${GOPROXY:-https://proxy.golang.org}
log() { printf '[build-binaries %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

stamp_ok() { [ -x "$BIN/$1" ] && [ "$(cat "$BIN/.$1.version" 2>/dev/null)" = "$2" ]; }
stamp() { echo "$2" > "$BIN/.$1.version"; }

build_k8s() {
  local want="v$K8S_VERSION" missing=()
  for b in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    stamp_ok "$b" "$want" || missing+=("$b")
  done
  [ ${#missing[@]} -eq 0 ] && { log "kubernetes $want: cached"; return; }
  log "kubernetes $want: building ${missing[*]} (cold: tens of minutes on 2 cores)"
  local dir="$BUILD/k8s-$K8S_VERSION" minor=${K8S_VERSION#1.}
  mkdir -p "$dir"; cd "$dir"
  if [ ! -f go.mod ]; then
    local mod staging goline
    mod=$(go mod download -json "k8s.io/kubernetes@$want" | python3 -c 'import json,sys;print(json.load(sys.stdin)["GoMod"])')
    staging=$(go mod edit -json "$mod" | python3 -c 'import json,sys;d=json.load(sys.stdin);print(" ".join(r["Path"] for r in d["Require"] if r["Version"]=="v0.0.0"))')
    goline=$(go mod edit -json "$mod" | python3 -c 'import json,sys;print(json.load(sys.stdin)["Go"])')
    go mod init local/k8sbins >/dev/null 2>&1
    go mod edit -go="$goline" -require="k8s.io/kubernetes@$want"
    grep '^godebug' "$mod" >> go.mod || true
    for m in $staging; do go mod edit -replace="$m=$m@v0.$minor"; done
    cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
    log "resolving modules (go mod tidy)"
    go mod tidy
  fi
  local maj=${minor%%.*}
  local V="-X k8s.io/component-base/version.gitVersion=$want -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$maj -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=$want -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$maj"
  for b in "${missing[@]}"; do
    log "compiling $b"
    go build -trimpath -tags selinux,notest,grpcnotrace -ldflags "-s -w $V" -o "$BIN/$b" "k8s.io/kubernetes/cmd/$b"
    stamp "$b" "$want"
    log "done $b ($(du -h "$BIN/$b" | cut -f1))"
  done
}

build_etcd() {
  local want="v$ETCD_VERSION"
  stamp_ok etcd "$want" && { log "etcd $want: cached"; return; }
  log "etcd $want: building"
  local dir="$BUILD/etcd-$ETCD_VERSION"; mkdir -p "$dir"; cd "$dir"
  [ -f go.mod ] || { go mod init local/etcdbin >/dev/null 2>&1; go get "go.etcd.io/etcd/server/v3@$want"; cat > tools.go <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GO
  go mod tidy; }
  go build -trimpath -ldflags "-s -w" -o "$BIN/etcd" go.etcd.io/etcd/server/v3
  stamp etcd "$want"
}

build_goinstall() {  # name module@version
  local name=$1 pkg=$2 want=${2##*@}
  stamp_ok "$name" "$want" && { log "$name $want: cached"; return; }
  log "$name $want: go install $pkg"
  GOBIN="$BIN" go install -trimpath -ldflags "-s -w" "$pkg"
  stamp "$name" "$want"
}

build_prometheus() {
  # Debian's prometheus package (2.42) is built without Kubernetes service discovery, which the
  # harness needs (role: pod). Build upstream with only that SD plugin (+ file/http/static); no
  # web UI assets (those need npm), the HTTP API is complete without them.
  local want="v$PROMETHEUS_VERSION" major minor patch
  IFS=. read -r major minor patch <<<"$PROMETHEUS_VERSION"
  local mod="v0.$((major * 100 + minor)).$patch"
  stamp_ok prometheus "$want" && { log "prometheus $want: cached"; return; }
  log "prometheus $want ($mod): go install (kubernetes SD only)"
  GOBIN="$BIN" go install -trimpath -tags netgo,remove_all_sd,enable_kubernetes_sd \
    -ldflags "-s -w -X github.com/prometheus/common/version.Version=$PROMETHEUS_VERSION -X github.com/prometheus/common/version.Branch=go-proxy" \
    "github.com/prometheus/prometheus/cmd/prometheus@$mod"
  stamp prometheus "$want"
  log "done prometheus ($(du -h "$BIN/prometheus" | cut -f1))"
}

build_promtool() {
  # promtool (rule unit tests: `promtool test rules`) from the same module and version as Prometheus.
  local want="v$PROMETHEUS_VERSION" major minor patch
  IFS=. read -r major minor patch <<<"$PROMETHEUS_VERSION"
  local mod="v0.$((major * 100 + minor)).$patch"
  stamp_ok promtool "$want" && { log "promtool $want: cached"; return; }
  log "promtool $want ($mod): go install"
  GOBIN="$BIN" go install -trimpath -tags netgo,remove_all_sd \
    -ldflags "-s -w -X github.com/prometheus/common/version.Version=$PROMETHEUS_VERSION -X github.com/prometheus/common/version.Branch=go-proxy" \
    "github.com/prometheus/prometheus/cmd/promtool@$mod"
  stamp promtool "$want"
  log "done promtool ($(du -h "$BIN/promtool" | cut -f1))"
}

kwok_stages() {  # the Stage YAMLs kwok v0.8 needs (it has no built-in ones), out of the module cache
  local want="v$KWOK_VERSION" dest="$CACHE/kwok-stages/v$KWOK_VERSION"
  [ -f "$dest/pod/fast/pod-ready.yaml" ] && { log "kwok stages $want: cached"; return; }
  local dir
  dir=$(go mod download -json "sigs.k8s.io/kwok@$want" | python3 -c 'import json,sys;print(json.load(sys.stdin)["Dir"])')
  mkdir -p "$dest"
  cp -r "$dir/kustomize/stage/." "$dest/"
  chmod -R u+w "$dest"
  log "kwok stages $want: copied to $dest"
}

what=${*:-all}
for w in $what; do
  case $w in
    etcd) build_etcd ;;
    kwok) build_goinstall kwok "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION"; kwok_stages ;;
    prometheus) build_prometheus ;;
    promtool) build_promtool ;;
    helm) build_goinstall helm "helm.sh/helm/v3/cmd/helm@v$HELM_VERSION" ;;
    k8s) build_k8s ;;
    all) build_etcd; build_goinstall kwok "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION"; kwok_stages; build_prometheus; build_promtool; build_k8s ;;
    *) echo "unknown target $w" >&2; exit 2 ;;
  esac
done
log "binaries in $BIN"
