#!/usr/bin/env bash
# Builds {{name}}.wasm from app.py with the SDK's build (sdk/python/build.sh).
set -euo pipefail
cd "$(dirname "$0")"
bash sdk/python/build.sh app.py {{name}}.wasm
echo "built {{name}}.wasm"
