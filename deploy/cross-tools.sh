#!/usr/bin/env bash
# Installs (once) what deploy/release.sh builds every released platform with, and prints the
# directory that holds cargo-zigbuild and zig, for the caller's PATH:
#
#   deploy/cross-tools.sh [--runners]
#
# - the Rust targets of the released platforms (rustup);
# - zig (PyPI's ziglang) and cargo-zigbuild (PyPI's cargo-zigbuild), at the versions below, in a
#   virtual environment of their own in the cache: the Linux binaries are static, linked by zig
#   against its musl, and the macOS ones by zig against its libSystem stubs (no SDK needed);
# - Debian's mingw-w64, the linker of the Windows binary.
# With --runners, also what the tests check the release with: Debian's qemu-user-static
# (runs the linux/arm64 binary), wine64 (the windows/amd64 one) and shellcheck (which actionlint
# runs on the release workflow's scripts).
#
# Idempotent: with everything in place it prints the directory in well under a second.
# Each step says what it does; on failure, which step broke.
set -euo pipefail

ZIG_VERSION=0.17.1
ZIGBUILD_VERSION=0.24.1
TARGETS=(x86_64-unknown-linux-musl aarch64-unknown-linux-musl x86_64-apple-darwin aarch64-apple-darwin
  x86_64-pc-windows-gnu)

cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/rollout-ext"
venv="$cache_root/cross-zig-$ZIG_VERSION-zigbuild-$ZIGBUILD_VERSION"
runners=""
[ "${1:-}" = --runners ] && runners=1

step=""
say() { printf '[cross-tools] %s\n' "$*" >&2; }
begin() { step="$*"; say "$step"; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
trap 'rc=$?; [ $rc -eq 0 ] || say "FAILED at step: ${step:-setup} (exit $rc)"' EXIT

# Debian packages, after the command they provide.
packages=("x86_64-w64-mingw32-gcc gcc-mingw-w64-x86-64")
[ -z "$runners" ] || packages+=("qemu-aarch64-static qemu-user-static" "wine wine wine64" "shellcheck shellcheck")
missing=()
for entry in "${packages[@]}"; do
  read -r -a words <<<"$entry"
  command -v "${words[0]}" >/dev/null || missing+=("${words[@]:1}")
done
if [ ${#missing[@]} -gt 0 ]; then
  begin "apt-get install ${missing[*]}"
  log=$(mktemp)
  if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >"$log" 2>&1; then
    begin "apt-get update (install failed with the current lists)"
    as_root apt-get update -qq >/dev/null
    begin "apt-get install ${missing[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      "${missing[@]}" >"$log" 2>&1 || { tail -n 20 "$log" >&2; rm -f "$log"; exit 1; }
  fi
  rm -f "$log"
fi

installed=$(rustup target list --installed)
for t in "${TARGETS[@]}"; do
  grep -qx "$t" <<<"$installed" && continue
  begin "rustup target add $t"
  rustup target add "$t" >/dev/null
done

# A marker written last: an install cut short is done again.
if [ ! -f "$venv/installed" ]; then
  begin "install ziglang $ZIG_VERSION and cargo-zigbuild $ZIGBUILD_VERSION (pip, into $venv)"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check \
    "ziglang==$ZIG_VERSION" "cargo-zigbuild==$ZIGBUILD_VERSION"
  touch "$venv/installed"
fi
step=""
echo "$venv/bin"
