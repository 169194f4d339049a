#!/bin/sh
# The one command for the files benchmark (bench.py says what it measures): builds bench-files
# and tessera, sets up TensorFlow in .venv-bench/tf (shared with bench/train) unless
# --no-install, and prints Tessera's and the peers' figures side by side with the ratios.
#
#   bench/files/run.sh [--rounds N] [--width W] [--no-install]
set -eu

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build}

if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" "$root" >&2
fi
if ! log=$(meson compile -C "$build" tessera bench-files 2>&1); then
    printf '%s\n' "$log" >&2
    echo "run.sh: the build failed" >&2
    exit 1
fi
exec /usr/bin/python3 "$root/bench/files/bench.py" --bench-files "$build/bench/bench-files" \
    --tessera "$build/tessera" "$@"
