#!/usr/bin/env bash
# Builds a JavaScript hook into a WebAssembly component, in one line:
#   bash hooks-sdk/js/build.sh app.js app.wasm
# APP.js is the ES module that exports the hook's points (see docs/hooks.md); the modules beside
# it are taken along, and the SDK's helpers are put beside it (import './rollout_ext_hooks.js').
# componentize-js (pinned) is installed once with npm into a directory cached under
# ~/.cache/rollout-ext (ROLLOUT_EXT_CACHE overrides); node and npm must be on PATH.
set -euo pipefail

version=0.23.0
sdk=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: build.sh APP.js OUTPUT.wasm"
app=${1:?$usage}
out=${2:?$usage}
if [[ $app != *.js || ! -f $app ]]; then
  echo "build.sh: $app is not a JavaScript file ($usage)" >&2
  exit 2
fi
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

# The app's directory, with the SDK's helpers beside it, staged where the build reads it.
app_dir=$(cd "$(dirname "$app")" && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp -R "$app_dir/." "$stage/"
cp "$sdk/js/rollout_ext_hooks.js" "$stage/"

out_dir=$(mkdir -p "$(dirname "$out")" && cd "$(dirname "$out")" && pwd)
# The host links WASI 0.2 without wasi:http, so the engine's fetch support is left out. A point's
# export left out, the failure every new hook meets, is said plainly with what to write instead
# of componentize-js's stack.
if ! errors=$(node "$cli" "$stage/$(basename "$app")" --wit "$sdk/wit" --world-name policy \
  --disable http fetch-event --out "$out_dir/$(basename "$out")" 2>&1 > /dev/null); then
  missing=$(sed -n 's/.*does not export a "\([a-z-]*\)" interface.*/\1/p' <<< "$errors" | head -n 1)
  case $missing in
    metadata)
      echo "build.sh: $app exports no metadata: every hook does, with describe() and validateConfig() (anyConfig(name, points) from './rollout_ext_hooks.js' gives both)" >&2 ;;
    selection | batching | gates)
      defer="defer${missing^}"
      echo "build.sh: $app exports no $missing: every hook exports metadata, selection, batching and gates; for a point it does not serve, export the SDK's deferring one: export const $missing = $defer; (import { $defer } from './rollout_ext_hooks.js')" >&2 ;;
    *) printf '%s\n' "$errors" >&2 ;;
  esac
  exit 1
fi
