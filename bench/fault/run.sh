#!/bin/sh
# The one command for the failure benchmark: builds the daemons and the CLI, sets up the peer
# (TensorFlow 2.15.1 in .venv-bench/tf-ps, as bench/ps does), then runs bench.py, which prints
# how Tessera and TensorFlow's ParameterServerStrategy live through a worker killed, a worker
# stopped, the PS killed and the chief killed (see bench.py's header).
#
#   bench/fault/run.sh [--rounds=N] [--worker-timeout=10s] [--no-install] [--no-tensorflow]
#
# BUILD_DIR (default: build at the repository root) picks the meson build directory. Exit
# status: 0 unless a Tessera job did not finish.
set -eu

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build}

if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" "$root" >&2
fi
if ! log=$(meson compile -C "$build" tessera tessera-ps tessera-worker tessera-chief 2>&1); then
    printf '%s\n' "$log" >&2
    echo "run.sh: the build failed" >&2
    exit 1
fi
exec /usr/bin/python3 "$root/bench/fault/bench.py" --build "$build" "$@"
