#!/bin/sh
# Tessera's ring all-reduce beside gloo (torch.distributed, Debian's python3-torch, installed
# with apt-get when missing and root) and iperf3 (bench/allreduce/run.py). BUILD_DIR (default:
# build at the repository root) picks the build.
#
#   bench/allreduce/run.sh [--rounds N] [--ranks P] [--mib 4,64,256]
set -eu

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build}

if ! /usr/bin/python3 -c 'import torch.distributed' 2>/dev/null || ! command -v iperf3 >/dev/null; then
    if [ "$(id -u)" = 0 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
            python3-torch iperf3 >/dev/null || {
            apt-get update >/dev/null
            DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
                python3-torch iperf3 >/dev/null
        }
    else
        echo "run.sh: needs Debian's python3-torch and iperf3 (apt-get install as root)" >&2
        exit 1
    fi
fi
if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" "$root" >&2
fi
if ! log=$(meson compile -C "$build" bench-allreduce 2>&1); then
    printf '%s\n' "$log" >&2
    echo "run.sh: the build failed" >&2
    exit 1
fi
exec /usr/bin/python3 "$root/bench/allreduce/run.py" --binary "$build/bench/bench-allreduce" "$@"
