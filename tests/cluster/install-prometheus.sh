#!/usr/bin/env bash
# Installs Prometheus 2.42.0 from Debian's packages and caches its server binary for the tests.
#
# The package's postinst would start a system Prometheus on :9090 (init script or systemd unit);
# this script blocks that with a temporary policy-rc.d and, should one start anyway, stops and
# disables it. The tests run the cached binary themselves, on loopback, with their own config.
#
# Idempotent: when the binary is already cached it prints where and exits in well under a second.
# Each step says what it does and, on failure, which step broke.
#
# Output: $ROLLOUT_EXT_PROMETHEUS_DIR (default:
# ${XDG_CACHE_HOME:-$HOME/.cache}/rollout-ext/prometheus-2.42.0) holds bin/prometheus.
set -euo pipefail

PROMETHEUS_VERSION=2.42.0
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/rollout-ext"
dest="${ROLLOUT_EXT_PROMETHEUS_DIR:-$cache_root/prometheus-$PROMETHEUS_VERSION}"

step=""
policy_rc=/usr/sbin/policy-rc.d
own_policy_rc=""
say() { printf '[prometheus] %s\n' "$*" >&2; }
begin() { step="$*"; say "$step"; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
on_exit() {
  local rc=$?
  if [ -n "$own_policy_rc" ]; then as_root rm -f "$policy_rc" || true; fi
  [ $rc -eq 0 ] || say "FAILED at step: ${step:-setup} (exit $rc)"
}
trap on_exit EXIT

if [ -x "$dest/bin/prometheus" ]; then
  say "cached in $dest/bin"
  exit 0
fi

# True when something accepts TCP connections on 127.0.0.1:9090 (no ss/netstat on a bare Debian).
port_9090_busy() { (exec 3<>/dev/tcp/127.0.0.1/9090) 2>/dev/null; }

installed_version() { dpkg-query -W -f='${Status} ${Version}\n' prometheus 2>/dev/null | sed -n 's/^install ok installed //p'; }

# Quiet; on failure the last lines of apt's output go to stderr (unless the caller will retry).
apt_install() {
  local log rc=0
  log=$(mktemp)
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus \
    >"$log" 2>&1 || rc=$?
  [ $rc -eq 0 ] || [ "${1:-}" = retry-later ] || tail -n 20 "$log" >&2
  rm -f "$log"
  return $rc
}

if [ -z "$(installed_version)" ]; then
  begin "keep the package from starting a system prometheus (policy-rc.d)"
  if [ ! -e "$policy_rc" ]; then
    printf '#!/bin/sh\n# temporary, from rollout-ext install-prometheus.sh\nexit 101\n' \
      | as_root tee "$policy_rc" >/dev/null
    as_root chmod 755 "$policy_rc"
    own_policy_rc=1
  fi

  begin "apt-get install prometheus"
  candidate=$(apt-cache policy prometheus 2>/dev/null | sed -n 's/^ *Candidate: //p')
  if [ -z "$candidate" ] || [ "$candidate" = "(none)" ]; then
    begin "apt-get update"
    as_root apt-get update -qq >/dev/null
    begin "apt-get install prometheus"
    apt_install
  elif ! apt_install retry-later; then
    # Stale package lists (e.g. a security update replaced the .deb): refresh once and retry.
    begin "apt-get update (install failed with the current lists)"
    as_root apt-get update -qq >/dev/null
    begin "apt-get install prometheus"
    apt_install
  fi

  if [ -n "$own_policy_rc" ]; then as_root rm -f "$policy_rc"; own_policy_rc=""; fi
fi

begin "check the Debian package is upstream $PROMETHEUS_VERSION"
pkg_version=$(installed_version)
case "$pkg_version" in
  "$PROMETHEUS_VERSION"+* | "$PROMETHEUS_VERSION"-* | "$PROMETHEUS_VERSION") ;;
  *) say "Debian's prometheus package is version '${pkg_version:-none}', not $PROMETHEUS_VERSION"; exit 1 ;;
esac

begin "make sure no system prometheus runs or starts at boot"
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
  as_root systemctl disable --now prometheus.service >/dev/null 2>&1 || true
fi
if [ -x /etc/init.d/prometheus ]; then
  as_root /etc/init.d/prometheus stop >/dev/null 2>&1 || true
  as_root update-rc.d prometheus disable >/dev/null 2>&1 || true
fi
# Whatever else the package started: the packaged binary run as the prometheus user (no pgrep
# on a bare Debian, so look through /proc).
for p in /proc/[0-9]*; do
  [ "$(readlink "$p/exe" 2>/dev/null || true)" = /usr/bin/prometheus ] || continue
  [ "$(stat -c %U "$p" 2>/dev/null || true)" = prometheus ] || continue
  as_root kill "${p#/proc/}" 2>/dev/null || true
done
for _ in $(seq 50); do port_9090_busy || break; sleep 0.1; done
if port_9090_busy; then
  say "something still listens on 127.0.0.1:9090 after stopping the packaged service"
  exit 1
fi

begin "check prometheus --version"
prom_bin=$(command -v prometheus || true)
[ -n "$prom_bin" ] || { say "prometheus not found after installing the package"; exit 1; }
version_out=$("$prom_bin" --version 2>&1 | head -n1)
case "$version_out" in
  *"version $PROMETHEUS_VERSION"[+\ ]*) ;;
  *) say "unexpected prometheus --version: $version_out"; exit 1 ;;
esac

begin "cache prometheus in $dest/bin"
mkdir -p "$dest/bin"
cp "$prom_bin" "$dest/bin/prometheus.tmp" && mv "$dest/bin/prometheus.tmp" "$dest/bin/prometheus"
step=""
say "ready in $dest/bin ($version_out)"
