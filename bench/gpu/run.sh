#!/bin/sh
# The GPU benchmark, on a machine with an NVIDIA GPU and PyTorch for CUDA: Tessera's training
# step (bench-gpu, the engine on the CUDA backend) beside PyTorch eager, torch.compile and CUDA
# graphs on the MLP (batch 64 and 1024), the CNN (64 and 256) and the wide MLP 784-2048-2048-10
# (1024); prints examples/s, Tessera's TFLOP/s beside the GPU's float32 peak, and the ratios.
#
#   bench/gpu/run.sh [--rounds N] [--steps N] [--device cuda:N] [CASE...]
#
# BENCH_GPU names a bench-gpu built elsewhere (a GPU machine given the program, not the
# sources); else BUILD_DIR (default: build) is built. PYTHON: an interpreter with torch.
set -eu

root=$(cd "$(dirname "$0")/../.." && pwd)
if [ -z "${BENCH_GPU:-}" ]; then
    build=${BUILD_DIR:-$root/build}
    [ -f "$build/build.ninja" ] || meson setup "$build" "$root" >&2
    if ! log=$(meson compile -C "$build" bench/bench-gpu 2>&1); then
        printf '%s\n' "$log" >&2
        echo "run.sh: the build failed" >&2
        exit 1
    fi
    BENCH_GPU=$build/bench/bench-gpu
fi
exec "${PYTHON:-python3}" "$root/bench/gpu/bench.py" --bench-gpu "$BENCH_GPU" "$@"
