#!/bin/sh
# The one command for the parameter-server benchmark: builds what it needs, sets up the peers
# (TensorFlow 2.15.1 in .venv-bench/tf-ps, Debian's python3-torch), then runs bench.py, which
# prints one report: training steps/s of Tessera, TensorFlow's ParameterServerStrategy and
# PyTorch's RPC parameter server side by side with the ratios, then bench-ps (push+pull of a
# 64 MiB variable against iperf3, 16 clients pushing 1 MiB gradients).
#
#   bench/ps/run.sh [--rounds=N] [--steps=N] [--spe=K] [--no-install] [--no-transfer]
#                   [--baseline=TESSERA]
#
# BUILD_DIR (default: build at the repository root) picks the meson build directory; it is
# configured with `meson setup` when missing. Exit status: 0 unless something failed to run.
set -eu

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build}

if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" "$root" >&2
fi
# Only the programs the benchmark runs; quiet unless the build fails.
if ! log=$(meson compile -C "$build" tessera tessera-ps tessera-worker tessera-chief bench-ps 2>&1); then
    printf '%s\n' "$log" >&2
    echo "run.sh: the build failed" >&2
    exit 1
fi
if ! command -v iperf3 >/dev/null 2>&1; then
    echo "run.sh: iperf3 is not installed (apt-get install iperf3); the iperf3 reference" \
        "will be missing" >&2
fi
exec /usr/bin/python3 "$root/bench/ps/bench.py" --tessera "$build/tessera" \
    --bench-ps "$build/bench/bench-ps" "$@"
