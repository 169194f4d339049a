#!/usr/bin/env bash
# docs/reference.md is what scripts/gen-reference.py makes of the tables that parse flags, job
# keys and layers, and of the daemons' /metrics: a flag, key or metric added without it fails.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${TESSERA_BUILD_DIR:?set TESSERA_BUILD_DIR to the build directory}"
fresh="$(mktemp)"
trap 'rm -f "$fresh"' EXIT
/usr/bin/python3 scripts/gen-reference.py "$build" "$fresh"
if ! diff -u docs/reference.md "$fresh"; then
  echo "docs/reference.md is stale: run scripts/gen-reference.py $build docs/reference.md"
  exit 1
fi
