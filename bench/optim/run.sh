#!/bin/sh
# The one command for the optimizer-kernel benchmark: builds bench-optim, then runs it. It prints
# each optimizer's update (as tessera-ps applies a pushed gradient, the new values written out
# for the pull) beside a memcpy of as many bytes, per instruction set and thread count.
#
#   bench/optim/run.sh [--params=N] [--reps=N]
#
# BUILD_DIR (default: build at the repository root) picks the meson build directory; it is
# configured with `meson setup` when missing. Exit status: 0 unless something failed to run.
set -eu

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build}

if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" "$root" >&2
fi
if ! log=$(meson compile -C "$build" bench-optim 2>&1); then
    printf '%s\n' "$log" >&2
    echo "run.sh: the build failed" >&2
    exit 1
fi
exec "$build/bench/bench-optim" "$@"
