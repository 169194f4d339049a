#!/bin/sh
# The synchronous strategies beside their peers: mirrored beside one_device on this host
# (bench/sync/mirrored.py), or with --mwms, multi_worker_mirrored on 2 workers beside PyTorch
# DDP over gloo and TensorFlow's MultiWorkerMirroredStrategy (bench/sync/mwms.py). Builds
# tessera, runs the sides in interleaved rounds, prints the medians and the ratios. Needs
# Debian's dataset-fashion-mnist (and python3-torch for --mwms). BUILD_DIR (default: build at
# the repository root) picks the build.
#
#   bench/sync/run.sh [--rounds=N] [--replicas=N] [--steps=N]
#   bench/sync/run.sh --mwms [--rounds=N] [--steps=N]
#   bench/sync/run.sh --mwms --packs 0,65536 [--hidden 1024,1024]  (Tessera alone, bucket sizes)
set -eu

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build}

if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" "$root" >&2
fi
if ! log=$(meson compile -C "$build" tessera tessera-chief tessera-worker tessera-ps 2>&1); then
    printf '%s\n' "$log" >&2
    echo "run.sh: the build failed" >&2
    exit 1
fi
if [ "${1:-}" = --mwms ]; then
    shift
    exec /usr/bin/python3 "$root/bench/sync/mwms.py" --tessera "$build/tessera" "$@"
fi
exec /usr/bin/python3 "$root/bench/sync/mirrored.py" --tessera "$build/tessera" "$@"
