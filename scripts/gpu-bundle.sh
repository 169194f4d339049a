#!/bin/sh
# Packs what a GPU machine without Debian's packages needs to check the CUDA backend, built
# here: the gpu suite's programs and bench-gpu, the shared libraries they load (but the C
# library's, the C++ runtime's and the CUDA stack's, which the GPU machine has), OpenBLAS, the
# Fashion-MNIST files and examples, and a run.sh that runs it all there (about 50 MB):
#
#   scripts/gpu-bundle.sh [DIR]      # default .gpu: inside the repository, ignored by git
#   then, on the GPU machine:  sh .gpu/run.sh   (logs into $OUT, or /tmp/gpu-out)
#
# BUILD_DIR (default: build) must be configured with the CUDA toolkit found.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
out=${1:-$root/.gpu}
data=/usr/share/datasets/fashion-mnist

grep -q "TESSERA_HAVE_CUDA 1" "$build/tessera_config.h" 2>/dev/null || {
    echo "gpu-bundle.sh: $build was configured without the CUDA toolkit" >&2
    exit 1
}
meson compile -C "$build" tests/gtest_cuda_backend tests/gtest_cuda_training bench/bench-gpu >&2
[ -f "$data/train-images-idx3-ubyte.gz" ] || {
    echo "gpu-bundle.sh: $data is missing: apt-get install dataset-fashion-mnist" >&2
    exit 1
}

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/examples" "$out/fashion-mnist" "$out/bench"
cp "$build/tests/gtest_cuda_backend" "$build/tests/gtest_cuda_training" \
    "$build/bench/bench-gpu" "$out/bin/"
openblas=$(readlink -f "$(ldconfig -p | awk '/libopenblas\.so\.0 .*x86-64/ {print $NF; exit}')")
cp "$openblas" "$out/lib/libopenblas.so.0"
# every library the programs and OpenBLAS load, but those the GPU machine brings its own of
for f in "$out"/bin/* "$out/lib/libopenblas.so.0"; do
    ldd "$f" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
    case $(basename "$lib") in
    libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | ld-linux* | libstdc++.so* | \
        libgcc_s.so* | libcublas* | libcuda*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
    esac
done
cp "$root/examples/fashion-mnist-mlp.yaml" "$root/examples/fashion-mnist-cnn.yaml" \
    "$out/examples/"
cp "$data"/*.gz "$out/fashion-mnist/"
cp "$root/bench/gpu/bench.py" "$root/bench/gpu/peer_torch.py" "$out/bench/"
# under the 64 MiB a device call carries: the libraries compressed (a third of their size)
tar -C "$out" -cJf "$out/lib.tar.xz" lib
rm -rf "$out/lib"

cat >"$out/run.sh" <<'RUN'
#!/bin/sh
# On the GPU machine: the gpu suite (every kernel and layer against the CPU backend, 50 steps'
# loss curve, Fashion-MNIST's targets), compute-sanitizer's memcheck and racecheck over the
# kernels, and the benchmark beside PyTorch. Logs into $OUT (default /tmp/gpu-out).
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/gpu-out}
lib=/tmp/tessera-gpu
mkdir -p "$out" "$lib"
python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
    "$here/lib.tar.xz" "$lib" || exit 1
# cuBLAS: the CUDA toolkit's, else the nvidia-cublas wheel PyTorch brings
cublas=$(PATH="$PATH:/sbin:/usr/sbin" ldconfig -p | awk '/libcublas\.so\.13 / {print $NF; exit}')
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null); do
    [ -n "$cublas" ] || cublas=$(find -L "$d" -name 'libcublas.so.13*' 2>/dev/null | head -1)
done
[ -n "$cublas" ] || { echo "run.sh: no libcublas.so.13 on this machine" | tee "$out/run.log"; exit 1; }
export LD_LIBRARY_PATH="$lib/lib:$(dirname "$cublas"):${LD_LIBRARY_PATH:-}"
mkdir -p /usr/share/datasets/fashion-mnist
cp -n "$here"/fashion-mnist/*.gz /usr/share/datasets/fashion-mnist/
export TESSERA_SOURCE_DIR="$here" TESSERA_REQUIRE_GPU=1
status=0
nvidia-smi >"$out/nvidia-smi.txt" 2>&1
"$here/bin/gtest_cuda_backend" >"$out/backend.log" 2>&1 || status=1
"$here/bin/gtest_cuda_training" >"$out/training.log" 2>&1 || status=1
for tool in memcheck racecheck; do
    compute-sanitizer --tool "$tool" --error-exitcode 3 "$here/bin/gtest_cuda_backend" \
        >"$out/$tool.log" 2>&1 || status=1
done
python3 "$here/bench/bench.py" --bench-gpu "$here/bin/bench-gpu" --rounds 3 >"$out/bench.log" 2>&1 ||
    status=1
tail -n 3 "$out"/backend.log "$out"/training.log "$out"/memcheck.log "$out"/racecheck.log
cat "$out/bench.log"
exit "$status"
RUN
chmod +x "$out/run.sh"
du -sh "$out"
