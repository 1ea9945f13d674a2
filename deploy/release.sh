#!/usr/bin/env bash
# Builds kubectl-rollout_ext for every platform the krew manifest lists, packs each with LICENSE
# into its krew archive, and writes every archive's sha256 (and the crate's version) into the
# manifest:
#
#   deploy/release.sh [--profile PROFILE] [--only OS/ARCH] OUTDIR [MANIFEST]
#
# PROFILE is cargo's (default release; make test's release-check builds the quicker
# `release-check`); --only builds one platform and writes its entry alone. MANIFEST defaults to
# krew-manifest.yaml at the repository root, and is copied beside the archives. The tools come
# from deploy/cross-tools.sh (installed on first use).
#
# The Linux binaries are static (musl, linked by zig): they run on any distribution, need no
# libraries, and run under qemu-user without a sysroot. The macOS binaries are linked by zig
# against its own stubs of the system's libraries under /usr/lib (no framework: see
# plugin/src/tls.rs), the arm64 one signed ad hoc by zig's linker as Apple silicon requires.
# Reproducible: source paths in the binaries are mapped to fixed names, the Windows linker
# writes no timestamp, and the archives have sorted entries, fixed owner and times, and gzip
# without a name or timestamp; the same commit and toolchain give the same sha256.
set -euo pipefail

usage="usage: deploy/release.sh [--profile PROFILE] [--only OS/ARCH] OUTDIR [MANIFEST]"
profile=release
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile=${2:?$usage}; shift 2 ;;
    --only) only=${2:?$usage}; shift 2 ;;
    -*) echo "$usage" >&2; exit 2 ;;
    *) break ;;
  esac
done
outdir=${1:?$usage}
root=$(cd "$(dirname "$0")/.." && pwd)
manifest=${2:-$root/krew-manifest.yaml}
target_dir=${CARGO_TARGET_DIR:-$root/target}
say() { printf '[release] %s\n' "$*" >&2; }

# The released platforms: krew's os/arch, Rust's target, how it is built.
platforms=(
  "linux/amd64 x86_64-unknown-linux-musl zig"
  "linux/arm64 aarch64-unknown-linux-musl zig"
  "darwin/amd64 x86_64-apple-darwin zig"
  "darwin/arm64 aarch64-apple-darwin zig"
  "windows/amd64 x86_64-pc-windows-gnu mingw"
)

version=v$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n1)
[[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || { say "cannot read the version from Cargo.toml"; exit 1; }

tools=$(bash "$root/deploy/cross-tools.sh")
export PATH="$tools:$PATH"

dir_of() { [ "$profile" = dev ] && echo debug || echo "$profile"; }
# Source paths mapped to fixed names in what is published (release): the archives are the same
# from any checkout. Other profiles keep them, so that their cached builds serve every checkout.
remap=""
[ "$profile" != release ] ||
  remap="--remap-path-prefix=$root=/rollout-ext --remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/cargo"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$outdir"
built=()
for entry in "${platforms[@]}"; do
  read -r platform triple how <<<"$entry"
  [ -z "$only" ] || [ "$only" = "$platform" ] || continue
  os=${platform%/*} arch=${platform#*/}
  exe=kubectl-rollout_ext
  [ "$os" = windows ] && exe=kubectl-rollout_ext.exe
  env_name=CARGO_TARGET_$(tr 'a-z-' 'A-Z_' <<<"$triple")_RUSTFLAGS
  say "build $platform ($triple, profile $profile)"
  case "$how" in
    zig)
      env "$env_name=$remap" cargo zigbuild --profile "$profile" --target "$triple" \
        -p rollout-ext --bin kubectl-rollout_ext ;;
    mingw)
      env "$env_name=$remap -C link-arg=-Wl,--no-insert-timestamp" \
        "CARGO_TARGET_$(tr 'a-z-' 'A-Z_' <<<"$triple")_LINKER=x86_64-w64-mingw32-gcc" \
        cargo build --profile "$profile" --target "$triple" -p rollout-ext --bin kubectl-rollout_ext ;;
  esac
  files="$stage/$os-$arch"
  mkdir -p "$files"
  install -m 0755 "$target_dir/$triple/$(dir_of)/$exe" "$files/$exe"
  install -m 0644 "$root/LICENSE" "$files/LICENSE"
  archive="$outdir/kubectl-rollout_ext-$os-$arch.tar.gz"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
    -C "$files" -cf - "$exe" LICENSE | gzip -n -9 >"$archive"
  built+=("$archive")
done
[ ${#built[@]} -gt 0 ] || { say "no platform ${only:+named $only }is released"; exit 2; }

# Each archive's entry: the sha256 line after the uri naming it; the version everywhere.
for archive in "${built[@]}"; do
  sha=$(sha256sum "$archive" | cut -d' ' -f1)
  tmp=$(mktemp)
  awk -v file="$(basename "$archive")" -v sha="$sha" -v version="$version" '
    /^  version:/ { print "  version: " version; next }
    /uri:/ { gsub(/download\/v[0-9]+\.[0-9]+\.[0-9]+\//, "download/" version "/"); if (index($0, file)) found = 1 }
    found && /sha256:/ { sub(/sha256:.*/, "sha256: \"" sha "\""); found = 0; done = 1 }
    { print }
    END { if (!done) exit 3 }
  ' "$manifest" >"$tmp" || { rm -f "$tmp"; say "$manifest has no entry for $(basename "$archive")"; exit 1; }
  cat "$tmp" >"$manifest"
  rm -f "$tmp"
  echo "$archive $sha"
done
# The manifest beside the archives it names (what the release publishes and the tests read).
[ "$(realpath -m "$manifest")" = "$(realpath -m "$outdir/krew-manifest.yaml")" ] ||
  cp "$manifest" "$outdir/krew-manifest.yaml"
