#!/usr/bin/env bash
# Builds the Python example hook with the SDK's one-line build:
#   examples-hooks/oldest-first-py/build.sh OUTPUT.wasm
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec bash "$here/../../hooks-sdk/python/build.sh" "$here/app.py" "${1:?usage: build.sh OUTPUT.wasm}"
