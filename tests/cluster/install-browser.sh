#!/usr/bin/env bash
# Installs Debian's headless Chromium (package chromium-headless-shell), in which the tests open
# the plan's pages (-o html) as a reviewer's browser would. Idempotent: when it is installed,
# this says so and exits at once. Each step says what it does and, on failure, which step broke.
set -euo pipefail

package=chromium-headless-shell
step=""
say() { printf '[%s] %s\n' "$package" "$*" >&2; }
begin() { step="$*"; say "$step"; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
trap 'rc=$?; [ $rc -eq 0 ] || say "FAILED at step: ${step:-setup} (exit $rc)"' EXIT

if command -v "$package" >/dev/null; then
  say "installed: $("$package" --version 2>/dev/null | head -n1)"
  exit 0
fi

# Quiet; on failure the last lines of apt's output go to stderr.
apt_install() {
  local log rc=0
  log=$(mktemp)
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$package" \
    >"$log" 2>&1 || rc=$?
  [ $rc -eq 0 ] || tail -n 20 "$log" >&2
  rm -f "$log"
  return $rc
}

candidate=$(apt-cache policy "$package" 2>/dev/null | sed -n 's/^ *Candidate: //p')
if [ -z "$candidate" ] || [ "$candidate" = "(none)" ] || ! { begin "apt-get install $package"; apt_install; }; then
  begin "apt-get update"
  as_root apt-get update -qq >/dev/null
  begin "apt-get install $package"
  apt_install
fi
begin "check $package --version"
say "installed: $("$package" --version 2>/dev/null | head -n1)"
