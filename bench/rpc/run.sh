#!/bin/sh
# The one command for the RPC benchmark: builds what it needs, then runs bench-rpc, which starts
# a tessera-ps on 127.0.0.1, measures tiny unary calls, tensor pushes and iperf3 loopback TCP
# (iperf3 must be installed: Debian package iperf3), and prints one report.
#
#   bench/rpc/run.sh [--rounds=N] [--seconds=S] [--iperf-seconds=S] [--no-iperf]
#
# BUILD_DIR (default: build at the repository root) picks the meson build directory; it is
# configured with `meson setup` when missing. Exit status: 0 unless something failed to run.
set -eu

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build}

if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" "$root" >&2
fi
# Only the two programs the benchmark runs; quiet unless the build fails.
if ! log=$(meson compile -C "$build" bench-rpc tessera-ps 2>&1); then
    printf '%s\n' "$log" >&2
    echo "run.sh: the build failed" >&2
    exit 1
fi
if ! command -v iperf3 >/dev/null 2>&1; then
    echo "run.sh: iperf3 is not installed (apt-get install iperf3); the iperf3 reference" \
        "will be missing" >&2
fi
exec "$build/bench/bench-rpc" "$@"
