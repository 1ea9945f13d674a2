#!/usr/bin/env bash
# Packs a built kubectl-rollout_ext with LICENSE into the krew archive for this machine's
# platform and writes the archive's sha256 (and the crate's version) into the krew manifest.
#
#   deploy/release.sh BINARY OUTDIR [MANIFEST]
#
# MANIFEST defaults to krew-manifest.yaml at the repository root. The archive is reproducible:
# sorted entries, fixed owner and times, gzip without a name or timestamp.
set -euo pipefail

binary=${1:?usage: deploy/release.sh BINARY OUTDIR [MANIFEST]}
outdir=${2:?usage: deploy/release.sh BINARY OUTDIR [MANIFEST]}
root=$(cd "$(dirname "$0")/.." && pwd)
manifest=${3:-$root/krew-manifest.yaml}

case "$(uname -s)" in
  Linux) os=linux ;;
  Darwin) os=darwin ;;
  *) echo "release.sh: unsupported OS $(uname -s)" >&2; exit 1 ;;
esac
case "$(uname -m)" in
  x86_64 | amd64) arch=amd64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) echo "release.sh: unsupported architecture $(uname -m)" >&2; exit 1 ;;
esac

version=v$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n1)
[[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "release.sh: cannot read the version from Cargo.toml" >&2; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
install -m 0755 "$binary" "$stage/kubectl-rollout_ext"
install -m 0644 "$root/LICENSE" "$stage/LICENSE"

mkdir -p "$outdir"
archive="$outdir/kubectl-rollout_ext-$os-$arch.tar.gz"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
  -C "$stage" -cf - kubectl-rollout_ext LICENSE | gzip -n -9 > "$archive"
sha=$(sha256sum "$archive" | cut -d' ' -f1)

# The platform's entry: the sha256 line after the uri naming this archive; the version everywhere.
tmp=$(mktemp)
awk -v file="kubectl-rollout_ext-$os-$arch.tar.gz" -v sha="$sha" -v version="$version" '
  /^  version:/ { print "  version: " version; next }
  /uri:/ { gsub(/download\/v[0-9]+\.[0-9]+\.[0-9]+\//, "download/" version "/"); if (index($0, file)) found = 1 }
  found && /sha256:/ { sub(/sha256:.*/, "sha256: \"" sha "\""); found = 0; done = 1 }
  { print }
  END { if (!done) exit 3 }
' "$manifest" > "$tmp" || { rm -f "$tmp"; echo "release.sh: $manifest has no entry for $os/$arch" >&2; exit 1; }
cat "$tmp" > "$manifest"
rm -f "$tmp"
echo "$archive $sha"
