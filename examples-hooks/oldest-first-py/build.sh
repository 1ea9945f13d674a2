#!/usr/bin/env bash
# Builds the Python example hook into a WebAssembly component:
#   examples-hooks/oldest-first-py/build.sh OUTPUT.wasm
# componentize-py (pinned) is installed once into a virtual environment cached under
# ~/.cache/rollout-ext (ROLLOUT_EXT_CACHE overrides); python3-venv is installed with apt-get when
# missing and this runs as root.
set -euo pipefail

version=0.25.1
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:?usage: build.sh OUTPUT.wasm}
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
"$venv/bin/componentize-py" -d "$root/hooks-sdk/wit" -w policy componentize -p "$here" app -o "$out" > /dev/null
