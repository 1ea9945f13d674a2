#!/usr/bin/env bash
# Installs a server from Debian's packages and caches its binary for the tests, which run it
# themselves on loopback with their own config:
#
#   install-server.sh PACKAGE VERSION PORT
#
# e.g. `prometheus 2.42.0 9090` or `docker-registry 2.8.2 5000`. The package, its service, the
# user it runs as and its binary all carry the package's name (true of both).
#
# The package's postinst would start a system server on PORT (init script or systemd unit); this
# script blocks that with a temporary policy-rc.d and, should one start anyway, stops and
# disables it.
#
# Idempotent: when the binary is already cached it prints where and exits in well under a second.
# Each step says what it does and, on failure, which step broke.
#
# Output: ${XDG_CACHE_HOME:-$HOME/.cache}/rollout-ext/PACKAGE-VERSION/bin/PACKAGE.
set -euo pipefail

[ $# -eq 3 ] || { echo "usage: $0 PACKAGE VERSION PORT" >&2; exit 2; }
package=$1 version=$2 port=$3
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/rollout-ext"
dest="$cache_root/$package-$version"

step=""
policy_rc=/usr/sbin/policy-rc.d
own_policy_rc=""
say() { printf '[%s] %s\n' "$package" "$*" >&2; }
begin() { step="$*"; say "$step"; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
on_exit() {
  local rc=$?
  if [ -n "$own_policy_rc" ]; then as_root rm -f "$policy_rc" || true; fi
  [ $rc -eq 0 ] || say "FAILED at step: ${step:-setup} (exit $rc)"
}
trap on_exit EXIT

if [ -x "$dest/bin/$package" ]; then
  say "cached in $dest/bin"
  exit 0
fi

# True when something accepts TCP connections on 127.0.0.1:PORT (no ss/netstat on a bare Debian).
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; }

installed_version() { dpkg-query -W -f='${Status} ${Version}\n' "$package" 2>/dev/null | sed -n 's/^install ok installed //p'; }

# Quiet; on failure the last lines of apt's output go to stderr (unless the caller will retry).
apt_install() {
  local log rc=0
  log=$(mktemp)
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$package" \
    >"$log" 2>&1 || rc=$?
  [ $rc -eq 0 ] || [ "${1:-}" = retry-later ] || tail -n 20 "$log" >&2
  rm -f "$log"
  return $rc
}

if [ -z "$(installed_version)" ]; then
  begin "keep the package from starting a system $package (policy-rc.d)"
  if [ ! -e "$policy_rc" ]; then
    printf '#!/bin/sh\n# temporary, from rollout-ext install-server.sh\nexit 101\n' \
      | as_root tee "$policy_rc" >/dev/null
    as_root chmod 755 "$policy_rc"
    own_policy_rc=1
  fi

  begin "apt-get install $package"
  candidate=$(apt-cache policy "$package" 2>/dev/null | sed -n 's/^ *Candidate: //p')
  if [ -z "$candidate" ] || [ "$candidate" = "(none)" ]; then
    begin "apt-get update"
    as_root apt-get update -qq >/dev/null
    begin "apt-get install $package"
    apt_install
  elif ! apt_install retry-later; then
    # Stale package lists (e.g. a security update replaced the .deb): refresh once and retry.
    begin "apt-get update (install failed with the current lists)"
    as_root apt-get update -qq >/dev/null
    begin "apt-get install $package"
    apt_install
  fi

  if [ -n "$own_policy_rc" ]; then as_root rm -f "$policy_rc"; own_policy_rc=""; fi
fi

begin "check the Debian package is upstream $version"
pkg_version=$(installed_version)
case "$pkg_version" in
  "$version"+* | "$version"-* | "$version") ;;
  *) say "Debian's $package package is version '${pkg_version:-none}', not $version"; exit 1 ;;
esac

begin "make sure no system $package runs or starts at boot"
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
  as_root systemctl disable --now "$package.service" >/dev/null 2>&1 || true
fi
if [ -x "/etc/init.d/$package" ]; then
  as_root "/etc/init.d/$package" stop >/dev/null 2>&1 || true
  as_root update-rc.d "$package" disable >/dev/null 2>&1 || true
fi
# Whatever else the package started: the packaged binary run as the package's user (no pgrep
# on a bare Debian, so look through /proc).
for p in /proc/[0-9]*; do
  [ "$(readlink "$p/exe" 2>/dev/null || true)" = "/usr/bin/$package" ] || continue
  [ "$(stat -c %U "$p" 2>/dev/null || true)" = "$package" ] || continue
  as_root kill "${p#/proc/}" 2>/dev/null || true
done
for _ in $(seq 50); do port_busy || break; sleep 0.1; done
if port_busy; then
  say "something still listens on 127.0.0.1:$port after stopping the packaged service"
  exit 1
fi

begin "check $package --version"
bin=$(command -v "$package" || true)
[ -n "$bin" ] || { say "$package not found after installing the package"; exit 1; }
version_out=$("$bin" --version 2>&1 | head -n1)
case "$version_out" in
  *"$version"[+\ ]*) ;;
  *) say "unexpected $package --version: $version_out"; exit 1 ;;
esac

begin "cache $package in $dest/bin"
mkdir -p "$dest/bin"
cp "$bin" "$dest/bin/$package.tmp" && mv "$dest/bin/$package.tmp" "$dest/bin/$package"
step=""
say "ready in $dest/bin ($version_out)"
