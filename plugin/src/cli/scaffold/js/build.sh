#!/usr/bin/env bash
# Builds {{name}}.wasm from app.js with the SDK's build (sdk/js/build.sh).
set -euo pipefail
cd "$(dirname "$0")"
bash sdk/js/build.sh app.js {{name}}.wasm
echo "built {{name}}.wasm"
