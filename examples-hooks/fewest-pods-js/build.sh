#!/usr/bin/env bash
# Builds the JavaScript example hook with the SDK's one-line build:
#   examples-hooks/fewest-pods-js/build.sh OUTPUT.wasm
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec bash "$here/../../hooks-sdk/js/build.sh" "$here/app.js" "${1:?usage: build.sh OUTPUT.wasm}"
