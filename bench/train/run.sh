#!/bin/sh
# The one command for the training benchmark: builds tessera, sets up the peers it compares
# with (PyTorch from PyPI and Keras/TensorFlow in virtual environments under .venv-bench/,
# Debian's python3-torch), then runs bench.py, which prints one report: examples/s of the
# training loop on every case at 1 and 2 threads, Tessera/peer ratios, peak RSS, and the
# issue's targets. A first run downloads about 4 GB (PyTorch's PyPI wheel is the CUDA build).
#
#   bench/train/run.sh [--rounds=N] [--no-install] [--quick] [--venv=DIR] [--baseline=TESSERA]
#
# BUILD_DIR (default: build at the repository root) picks the meson build directory; it is
# configured with `meson setup` when missing. Exit status: 0 unless something failed to run.
set -eu

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build}

if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" "$root" >&2
fi
# Only the program the benchmark runs; quiet unless the build fails.
if ! log=$(meson compile -C "$build" tessera 2>&1); then
    printf '%s\n' "$log" >&2
    echo "run.sh: the build failed" >&2
    exit 1
fi
exec /usr/bin/python3 "$root/bench/train/bench.py" --tessera "$build/tessera" "$@"
