#!/bin/sh
# mirrored beside one_device on this host (bench/sync/mirrored.py): builds tessera, then runs
# both sides in interleaved rounds and prints the medians and their ratio. Needs Debian's
# dataset-fashion-mnist. BUILD_DIR (default: build at the repository root) picks the build.
#
#   bench/sync/run.sh [--rounds=N] [--replicas=N] [--steps=N]
set -eu

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build}

if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" "$root" >&2
fi
if ! log=$(meson compile -C "$build" tessera 2>&1); then
    printf '%s\n' "$log" >&2
    echo "run.sh: the build failed" >&2
    exit 1
fi
exec /usr/bin/python3 "$root/bench/sync/mirrored.py" --tessera "$build/tessera" "$@"
