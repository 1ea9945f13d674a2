#!/usr/bin/env bash
# Builds the JavaScript example hook into a WebAssembly component:
#   examples-hooks/fewest-pods-js/build.sh OUTPUT.wasm
# componentize-js (pinned) is installed once with npm into a directory cached under
# ~/.cache/rollout-ext (ROLLOUT_EXT_CACHE overrides); node and npm must be on PATH.
set -euo pipefail

version=0.23.0
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:?usage: build.sh OUTPUT.wasm}
cache=${ROLLOUT_EXT_CACHE:-$HOME/.cache/rollout-ext}
dir=$cache/componentize-js-$version
cli=$dir/node_modules/@bytecodealliance/componentize-js/src/cli.js

for tool in node npm; do
  if ! command -v "$tool" > /dev/null; then
    echo "build.sh: $tool is needed to build the JavaScript hook (install Node.js 20 or later with npm)" >&2
    exit 1
  fi
done

if [[ ! -f $cli ]]; then
  echo "build.sh: installing componentize-js $version into $dir" >&2
  # Installed beside and moved into place at the end, so an interrupted install is redone.
  rm -rf "$dir.partial"
  mkdir -p "$dir.partial"
  npm install --prefix "$dir.partial" --no-audit --no-fund --save-exact \
    "@bytecodealliance/componentize-js@$version" >&2
  rm -rf "$dir"
  mv "$dir.partial" "$dir"
fi

mkdir -p "$(dirname "$out")"
# The host links WASI 0.2 without wasi:http, so the engine's fetch support is left out.
node "$cli" "$here/app.js" --wit "$root/hooks-sdk/wit" --world-name policy \
  --disable http fetch-event --out "$out"
