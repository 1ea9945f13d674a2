#!/usr/bin/env bash
# Builds and caches the real test control plane: kube-apiserver, kube-controller-manager and
# kube-scheduler 1.20.2 from Debian's source package, plus etcd from Debian.
#
# Idempotent: when every binary is already cached it prints where and exits in well under a second.
# Each step says what it does and, on failure, which step broke.
#
# Output: $ROLLOUT_EXT_K8S_DIR (default: ${XDG_CACHE_HOME:-$HOME/.cache}/rollout-ext/k8s-1.20.2)
# holds bin/{etcd,kube-apiserver,kube-controller-manager,kube-scheduler}.
set -euo pipefail

K8S_VERSION=1.20.2
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/rollout-ext"
dest="${ROLLOUT_EXT_K8S_DIR:-$cache_root/k8s-$K8S_VERSION}"
bins=(kube-apiserver kube-controller-manager kube-scheduler)

step=""
say() { printf '[control-plane] %s\n' "$*" >&2; }
begin() { step="$*"; say "$step"; }
trap 'rc=$?; [ $rc -eq 0 ] || say "FAILED at step: ${step:-setup} (exit $rc)"' EXIT

cached() {
  [ -x "$dest/bin/etcd" ] || return 1
  for b in "${bins[@]}"; do [ -x "$dest/bin/$b" ] || return 1; done
}

if cached; then
  say "cached in $dest/bin"
  exit 0
fi

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

begin "enable Debian source packages"
src_list=/etc/apt/sources.list.d/debian-src.sources
if [ ! -f "$src_list" ] && [ -f /etc/apt/sources.list.d/debian.sources ]; then
  sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources | as_root tee "$src_list" >/dev/null
fi

begin "apt-get update"
as_root apt-get update -qq

begin "install golang-go etcd-server rsync reflect2 sources"
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
  golang-go etcd-server rsync golang-github-modern-go-reflect2-dev >/dev/null

mkdir -p "$dest/bin"
begin "cache etcd"
etcd_bin=$(command -v etcd || true)
[ -n "$etcd_bin" ] || { say "etcd not found after installing etcd-server"; exit 1; }
cp "$etcd_bin" "$dest/bin/etcd.tmp" && mv "$dest/bin/etcd.tmp" "$dest/bin/etcd"

work="$cache_root/build-k8s-$K8S_VERSION"
mkdir -p "$work"
cd "$work"

begin "download the kubernetes $K8S_VERSION source package"
# Debian ships 1.20.2 as version "1.20.5+really1.20.2".
shopt -s nullglob
tarballs=(kubernetes_*.orig.tar.*)
if [ ${#tarballs[@]} -eq 0 ]; then
  apt-get source --download-only kubernetes >/dev/null 2>&1
fi
tarballs=(kubernetes_*really"$K8S_VERSION".orig.tar.* kubernetes_"$K8S_VERSION".orig.tar.*)
[ ${#tarballs[@]} -gt 0 ] || { say "Debian's kubernetes source package is not version $K8S_VERSION"; exit 1; }
orig=${tarballs[0]}

begin "unpack $orig"
src="$work/src"
if [ ! -f "$src/Makefile" ]; then
  rm -rf "$src" && mkdir -p "$src"
  tar -xf "$orig" -C "$src" --strip-components=1
fi

begin "replace vendored reflect2 1.0.1 (crashes under Go >= 1.18) with Debian's reflect2"
reflect2_src=/usr/share/gocode/src/github.com/modern-go/reflect2
[ -d "$reflect2_src" ] || { say "missing $reflect2_src"; exit 1; }
rm -rf "$src/vendor/github.com/modern-go/reflect2"
cp -r "$reflect2_src" "$src/vendor/github.com/modern-go/reflect2"

begin "build ${bins[*]} (several minutes on 2 cores)"
cd "$src"
export GOPATH="$src/.go" CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-}"
mkdir -p .go/src/k8s.io
[ -e .go/src/k8s.io/kubernetes ] || ln -s ../../.. .go/src/k8s.io/kubernetes
make WHAT="cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler" >"$work/build.log" 2>&1 \
  || { tail -n 40 "$work/build.log" >&2; exit 1; }

begin "cache the binaries in $dest/bin"
for b in "${bins[@]}"; do
  out=$(find _output -type f -name "$b" -perm -u+x | head -n1)
  [ -n "$out" ] || { say "build produced no $b"; exit 1; }
  cp "$out" "$dest/bin/$b.tmp" && mv "$dest/bin/$b.tmp" "$dest/bin/$b"
done

begin "remove the build tree"
cd / && rm -rf "$work"
step=""
say "ready in $dest/bin"
