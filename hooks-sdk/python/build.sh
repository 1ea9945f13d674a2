#!/usr/bin/env bash
# Builds a Python hook into a WebAssembly component, in one line:
#   bash hooks-sdk/python/build.sh app.py app.wasm
# APP.py is the module that defines the hook's points (see docs/hooks.md); other modules beside it
# are taken along.
# componentize-py (pinned) is installed once into a virtual environment cached under
# ~/.cache/rollout-ext (ROLLOUT_EXT_CACHE overrides); python3-venv is installed with apt-get when
# missing and this runs as root.
set -euo pipefail

version=0.25.1
sdk=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: build.sh APP.py OUTPUT.wasm"
app=${1:?$usage}
out=${2:?$usage}
if [[ $app != *.py || ! -f $app ]]; then
  echo "build.sh: $app is not a Python file ($usage)" >&2
  exit 2
fi
app_dir=$(cd "$(dirname "$app")" && pwd)
app_module=$(basename "$app" .py)
cache=${ROLLOUT_EXT_CACHE:-$HOME/.cache/rollout-ext}
venv=$cache/componentize-py-$version

if [[ ! -x $venv/bin/componentize-py ]]; then
  if ! python3 -m venv --help > /dev/null 2>&1 || ! python3 -c 'import ensurepip' 2> /dev/null; then
    if [[ $(id -u) == 0 ]] && command -v apt-get > /dev/null; then
      echo "build.sh: installing python3-venv" >&2
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv > /dev/null
    else
      echo "build.sh: python3 with the venv module is needed (apt-get install python3-venv)" >&2
      exit 1
    fi
  fi
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "componentize-py==$version"
fi

mkdir -p "$(dirname "$out")"
# componentize-py's own failure is a Python traceback wrapped in a Rust error (with a backtrace
# when RUST_BACKTRACE is set); the one that every new hook meets, a point's class left out, is
# said plainly with what to write instead.
if ! errors=$(RUST_BACKTRACE=0 "$venv/bin/componentize-py" -d "$sdk/wit" -w policy componentize \
  -p "$app_dir" -p "$sdk/python" "$app_module" -o "$out" 2>&1 > /dev/null); then
  missing=$(sed -n "s/.*module '$app_module' has no attribute '\([A-Za-z]*\)'.*/\1/p" <<< "$errors" | head -n 1)
  case $missing in
    Metadata)
      echo "build.sh: $app defines no class Metadata: every hook has one, with describe() (derive it from the SDK's AnyConfig: class Metadata(AnyConfig))" >&2 ;;
    Selection | Batching | Gates)
      echo "build.sh: $app defines no class $missing: every hook exports Metadata, Selection, Batching and Gates; for a point it does not serve, take the SDK's deferring one: class $missing(Defer$missing): pass (from rollout_ext_hooks import Defer$missing)" >&2 ;;
    *) printf '%s\n' "$errors" >&2 ;;
  esac
  exit 1
fi
