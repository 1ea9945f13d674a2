#!/usr/bin/env bash
# Builds and caches the real test cluster from Go modules: kube-apiserver,
# kube-controller-manager and kube-scheduler of the release the wrapper module in
# tests/cluster/k8s/ requires (k8s.io/kubernetes, staging modules at their published versions),
# etcd at the version that release requires (go.etcd.io/etcd/server/v3), and kwok (the node
# simulator, sigs.k8s.io/kwok at the version in tests/cluster/kwok/VERSION) with the stages its
# module ships (kustomize/stage/, read from the module cache, never copied into the repo), and
# Karpenter (sigs.k8s.io/karpenter at the version in tests/cluster/karpenter/VERSION, its kwok
# cloud provider) with the CustomResourceDefinitions its module ships, taken the same way; and
# the NodeMaintenance CustomResourceDefinition of medik8s' node-maintenance-operator module
# (github.com/medik8s/node-maintenance-operator at tests/cluster/node-maintenance/VERSION, checked
# against the hash in SUM beside it: the public checksum database does not list that module);
# and krew (sigs.k8s.io/krew at tests/cluster/krew/VERSION) with its manifest validator, which
# check and install the release archives as users install the plugin; and actionlint
# (github.com/rhysd/actionlint at tests/cluster/actionlint/VERSION), which checks the release
# workflow.
# Static, as upstream ships them, and stamped with the release so that `--version` and the
# server's /version say it.
#
# Needs Go >= the release's go line (1.26 for 1.37) and the Go module proxy; nothing else.
# Idempotent: when every binary is already cached it prints where and exits in well under a second.
# Each step says what it does and how long it took; on failure, which step broke.
#
# Output: $ROLLOUT_EXT_K8S_DIR (default: ${XDG_CACHE_HOME:-$HOME/.cache}/rollout-ext/k8s-VERSION)
# holds bin/{etcd,kube-apiserver,kube-controller-manager,kube-scheduler};
# $ROLLOUT_EXT_KWOK_DIR (default: .../rollout-ext/kwok-VERSION) holds bin/kwok and stages/;
# $ROLLOUT_EXT_KARPENTER_DIR (default: .../rollout-ext/karpenter-VERSION) holds bin/karpenter
# (the kwok provider's main package, named so that it does not collide with kwok) and crds/;
# $ROLLOUT_EXT_KREW_DIR (default: .../rollout-ext/krew-VERSION) holds bin/krew and
# bin/validate-krew-manifest; $ROLLOUT_EXT_ACTIONLINT_DIR (default:
# .../rollout-ext/actionlint-VERSION) holds bin/actionlint.
set -euo pipefail

module_dir="$(cd "$(dirname "$0")" && pwd)/k8s"
K8S_VERSION=$(sed -n 's#^\s*k8s\.io/kubernetes v\([0-9.]*\).*#\1#p' "$module_dir/go.mod")
[ -n "$K8S_VERSION" ] || { echo "[control-plane] $module_dir/go.mod requires no k8s.io/kubernetes" >&2; exit 1; }
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/rollout-ext"
dest="${ROLLOUT_EXT_K8S_DIR:-$cache_root/k8s-$K8S_VERSION}"
bins=(kube-apiserver kube-controller-manager kube-scheduler etcd)
KWOK_VERSION=$(tr -d '[:space:]' <"$(dirname "$module_dir")/kwok/VERSION")
KREW_VERSION=$(tr -d '[:space:]' <"$(dirname "$module_dir")/krew/VERSION")
krew_dest="${ROLLOUT_EXT_KREW_DIR:-$cache_root/krew-${KREW_VERSION#v}}"
ACTIONLINT_VERSION=$(tr -d '[:space:]' <"$(dirname "$module_dir")/actionlint/VERSION")
actionlint_dest="${ROLLOUT_EXT_ACTIONLINT_DIR:-$cache_root/actionlint-${ACTIONLINT_VERSION#v}}"
kwok_dest="${ROLLOUT_EXT_KWOK_DIR:-$cache_root/kwok-${KWOK_VERSION#v}}"
# The stages of kwok's module the test cluster runs: nodes Ready at once and kept so through
# their Lease, pods Running and Ready once bound, terminating pods removed.
KARPENTER_VERSION=$(tr -d '[:space:]' <"$(dirname "$module_dir")/karpenter/VERSION")
karpenter_dest="${ROLLOUT_EXT_KARPENTER_DIR:-$cache_root/karpenter-${KARPENTER_VERSION#v}}"
NMO_MODULE=github.com/medik8s/node-maintenance-operator
NMO_VERSION=$(tr -d '[:space:]' <"$(dirname "$module_dir")/node-maintenance/VERSION")
NMO_SUM=$(tr -d '[:space:]' <"$(dirname "$module_dir")/node-maintenance/SUM")
nmo_dest="${ROLLOUT_EXT_NMO_DIR:-$cache_root/node-maintenance-${NMO_VERSION#v}}"
nmo_crd=config/crd/bases/nodemaintenance.medik8s.io_nodemaintenances.yaml
# Karpenter's definitions (NodePool, NodeClaim) and its kwok provider's (KWOKNodeClass).
karpenter_crds=(pkg/apis/crds/karpenter.sh_nodepools.yaml pkg/apis/crds/karpenter.sh_nodeclaims.yaml
  kwok/apis/crds/karpenter.kwok.sh_kwoknodeclasses.yaml)
stages=(node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml
  pod/fast/pod-ready.yaml pod/fast/pod-delete.yaml)

step=""
started=0
say() { printf '[control-plane] %s\n' "$*" >&2; }
done_step() { [ -z "$step" ] || say "  done in $(($(date +%s) - started))s"; }
begin() { done_step; step="$*"; started=$(date +%s); say "$step"; }
trap 'rc=$?; [ $rc -eq 0 ] || say "FAILED at step: ${step:-setup} (exit $rc)"' EXIT

cached() {
  for b in "${bins[@]}"; do [ -x "$dest/bin/$b" ] || return 1; done
}
kwok_cached() {
  [ -x "$kwok_dest/bin/kwok" ] || return 1
  for s in "${stages[@]}"; do [ -f "$kwok_dest/stages/$(basename "$s")" ] || return 1; done
}

karpenter_cached() {
  [ -x "$karpenter_dest/bin/karpenter" ] || return 1
  for c in "${karpenter_crds[@]}"; do [ -f "$karpenter_dest/crds/$(basename "$c")" ] || return 1; done
}

nmo_cached() {
  [ -f "$nmo_dest/crds/$(basename "$nmo_crd")" ]
}

krew_cached() { [ -x "$krew_dest/bin/krew" ] && [ -x "$krew_dest/bin/validate-krew-manifest" ]; }
actionlint_cached() { [ -x "$actionlint_dest/bin/actionlint" ]; }

if cached && kwok_cached && karpenter_cached && nmo_cached && krew_cached && actionlint_cached; then
  say "Kubernetes $K8S_VERSION cached in $dest/bin, kwok $KWOK_VERSION in $kwok_dest, Karpenter $KARPENTER_VERSION in $karpenter_dest, NodeMaintenance $NMO_VERSION in $nmo_dest, krew $KREW_VERSION in $krew_dest, actionlint $ACTIONLINT_VERSION in $actionlint_dest"
  exit 0
fi

begin "check Go"
# Debian's golang-go (/usr/bin/go) is too old for a current release and may come first on PATH.
go_bin=""
for g in "${GO:-}" /usr/local/go/bin/go "$(command -v go || true)"; do
  [ -n "$g" ] && [ -x "$g" ] || continue
  have=$("$g" env GOVERSION 2>/dev/null | sed 's/^go//') || continue
  need=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$module_dir/go.mod")
  if [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n1)" = "$need" ]; then go_bin=$g; break; fi
done
[ -n "$go_bin" ] || { say "no Go >= $(sed -n 's/^go //p' "$module_dir/go.mod") found (set GO=/path/to/go)"; exit 1; }
say "  $("$go_bin" version)"

build_kubernetes() {
  etcd_version=$(sed -n 's#^\s*go\.etcd\.io/etcd/server/v3 v\([0-9.]*\).*#\1#p' "$module_dir/go.mod")
  minor=${K8S_VERSION#*.}; minor=${minor%%.*}
  commit="rollout-ext-test-build"
  stamp=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    stamp+=" -X $pkg.gitVersion=v$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    stamp+=" -X $pkg.gitTreeState=clean -X $pkg.gitCommit=$commit"
  done

  cd "$module_dir"
  export CGO_ENABLED=0 GOFLAGS="-mod=readonly -trimpath ${GOFLAGS:-}"
  begin "download the modules of Kubernetes $K8S_VERSION and etcd $etcd_version (go mod download)"
  "$go_bin" mod download

  build="$dest/bin.partial"
  mkdir -p "$build"
  for c in kube-apiserver kube-controller-manager kube-scheduler; do
    begin "build $c $K8S_VERSION (minutes on 2 cores)"
    "$go_bin" build -ldflags "-s -w$stamp" -o "$build/$c" "k8s.io/kubernetes/cmd/$c"
  done
  begin "build etcd $etcd_version"
  "$go_bin" build -ldflags "-s -w" -o "$build/etcd" go.etcd.io/etcd/server/v3

  begin "check the versions"
  "$build/kube-apiserver" --version | grep -qx "Kubernetes v$K8S_VERSION" \
    || { say "kube-apiserver --version says '$("$build/kube-apiserver" --version)', not v$K8S_VERSION"; exit 1; }
  "$build/etcd" --version | grep -q "etcd Version: $etcd_version" \
    || { say "etcd --version does not say $etcd_version"; exit 1; }

  begin "cache the binaries in $dest/bin"
  rm -rf "$dest/bin" && mv "$build" "$dest/bin"
  done_step
  step=""
  say "Kubernetes $K8S_VERSION and etcd $etcd_version ready in $dest/bin"
}

build_kwok() {
  mkdir -p "$kwok_dest" && cd "$kwok_dest"
  begin "build kwok $KWOK_VERSION (go install)"
  mkdir -p "$kwok_dest/bin.partial"
  GOBIN="$kwok_dest/bin.partial" CGO_ENABLED=0 GOFLAGS=-trimpath "$go_bin" install "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  "$kwok_dest/bin.partial/kwok" --version | grep -q "${KWOK_VERSION#v}" \
    || { say "kwok --version says '$("$kwok_dest/bin.partial/kwok" --version)', not $KWOK_VERSION"; exit 1; }
  begin "take kwok's stages from its module"
  module=$(GOFLAGS= "$go_bin" mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
  [ -d "$module/kustomize/stage" ] || { say "kwok's module has no kustomize/stage (looked in '$module')"; exit 1; }
  rm -rf "$kwok_dest/stages" && mkdir -p "$kwok_dest/stages"
  for s in "${stages[@]}"; do cp "$module/kustomize/stage/$s" "$kwok_dest/stages/"; done
  chmod u+w "$kwok_dest/stages"/*
  rm -rf "$kwok_dest/bin" && mv "$kwok_dest/bin.partial" "$kwok_dest/bin"
  done_step
  step=""
  say "kwok $KWOK_VERSION ready in $kwok_dest"
}

build_karpenter() {
  mkdir -p "$karpenter_dest" && cd "$karpenter_dest"
  begin "build Karpenter $KARPENTER_VERSION with its kwok cloud provider (go install, a minute or two)"
  rm -rf "$karpenter_dest/bin.partial" && mkdir -p "$karpenter_dest/bin.partial"
  GOBIN="$karpenter_dest/bin.partial" CGO_ENABLED=0 GOFLAGS=-trimpath "$go_bin" install \
    -ldflags "-s -w -X sigs.k8s.io/karpenter/pkg/operator.Version=$KARPENTER_VERSION" \
    "sigs.k8s.io/karpenter/kwok@$KARPENTER_VERSION"
  # The main package is named kwok, as the node simulator is.
  mv "$karpenter_dest/bin.partial/kwok" "$karpenter_dest/bin.partial/karpenter"
  "$go_bin" version -m "$karpenter_dest/bin.partial/karpenter" | grep -q "sigs.k8s.io/karpenter[[:space:]]*$KARPENTER_VERSION" \
    || { say "bin/karpenter was not built from sigs.k8s.io/karpenter $KARPENTER_VERSION"; exit 1; }
  begin "take Karpenter's CustomResourceDefinitions from its module"
  module=$(GOFLAGS= "$go_bin" mod download -json "sigs.k8s.io/karpenter@$KARPENTER_VERSION" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
  rm -rf "$karpenter_dest/crds" && mkdir -p "$karpenter_dest/crds"
  for c in "${karpenter_crds[@]}"; do
    [ -f "$module/$c" ] || { say "Karpenter's module has no $c (looked in '$module')"; exit 1; }
    cp "$module/$c" "$karpenter_dest/crds/"
  done
  chmod u+w "$karpenter_dest/crds"/*
  rm -rf "$karpenter_dest/bin" && mv "$karpenter_dest/bin.partial" "$karpenter_dest/bin"
  done_step
  step=""
  say "Karpenter $KARPENTER_VERSION ready in $karpenter_dest"
}

take_nmo_crd() {
  mkdir -p "$nmo_dest" && cd "$nmo_dest"
  begin "take the NodeMaintenance CustomResourceDefinition from $NMO_MODULE $NMO_VERSION"
  info=$(GOFLAGS= GONOSUMDB="$NMO_MODULE" "$go_bin" mod download -json "$NMO_MODULE@$NMO_VERSION")
  sum=$(printf '%s\n' "$info" | sed -n 's/^\s*"Sum": "\(.*\)",$/\1/p')
  [ "$sum" = "$NMO_SUM" ] || { say "$NMO_MODULE $NMO_VERSION has hash '$sum', not $NMO_SUM"; exit 1; }
  module=$(printf '%s\n' "$info" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
  [ -f "$module/$nmo_crd" ] || { say "$NMO_MODULE has no $nmo_crd (looked in '$module')"; exit 1; }
  rm -rf "$nmo_dest/crds" && mkdir -p "$nmo_dest/crds"
  cp "$module/$nmo_crd" "$nmo_dest/crds/" && chmod u+w "$nmo_dest/crds"/*
  done_step
  step=""
  say "the NodeMaintenance definition of $NMO_VERSION ready in $nmo_dest"
}

# Installs the Go packages PKG@VERSION... into DEST/bin, through DEST/bin.partial: a build cut
# short leaves no bin/ to be taken for cached.
go_install_into() {
  local dest=$1; shift
  mkdir -p "$dest" && cd "$dest"
  rm -rf "$dest/bin.partial" && mkdir -p "$dest/bin.partial"
  GOBIN="$dest/bin.partial" CGO_ENABLED=0 GOFLAGS=-trimpath "$go_bin" install "$@"
  rm -rf "$dest/bin" && mv "$dest/bin.partial" "$dest/bin"
  done_step
  step=""
}

build_krew() {
  begin "build krew $KREW_VERSION and its manifest validator (go install)"
  go_install_into "$krew_dest" "sigs.k8s.io/krew/cmd/krew@$KREW_VERSION" \
    "sigs.k8s.io/krew/cmd/validate-krew-manifest@$KREW_VERSION"
  say "krew $KREW_VERSION ready in $krew_dest"
}

build_actionlint() {
  begin "build actionlint $ACTIONLINT_VERSION (go install)"
  go_install_into "$actionlint_dest" "github.com/rhysd/actionlint/cmd/actionlint@$ACTIONLINT_VERSION"
  say "actionlint $ACTIONLINT_VERSION ready in $actionlint_dest"
}

cached || build_kubernetes
kwok_cached || build_kwok
karpenter_cached || build_karpenter
nmo_cached || take_nmo_crd
krew_cached || build_krew
actionlint_cached || build_actionlint
