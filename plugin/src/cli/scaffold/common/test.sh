#!/usr/bin/env bash
# Runs the hook's unit tests, then checks {{name}}.wasm (./build.sh) against each fixture with
# `kubectl rollout-ext hooks test` (ROLLOUT_EXT overrides the command).
set -euo pipefail
cd "$(dirname "$0")"
{{unit_tests}}
rollout_ext=${ROLLOUT_EXT:-kubectl rollout-ext}
for fixture in fixtures/*.yaml; do
  $rollout_ext hooks test {{name}}.wasm --policy policy.yaml --expect "$fixture"
done
