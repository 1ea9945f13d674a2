#!/usr/bin/env bash
# Builds {{name}}.wasm (a WASI 0.2 component) from this crate.
set -euo pipefail
cd "$(dirname "$0")"
rustup target add wasm32-wasip2 > /dev/null 2>&1 || true
cargo build --release --target wasm32-wasip2
target=${CARGO_TARGET_DIR:-target}
cp "$target/wasm32-wasip2/release/{{crate}}.wasm" {{name}}.wasm
echo "built {{name}}.wasm"
