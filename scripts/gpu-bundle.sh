#!/bin/sh
# Packs what a GPU machine without Debian's packages needs to check the CUDA backend, built
# here: the gpu suite's programs and bench-gpu, the shared libraries they load (but the C
# library's, the C++ runtime's and the CUDA stack's, which the GPU machine has), OpenBLAS, the
# Fashion-MNIST files and examples, and a run.sh that runs it all there (about 50 MB):
#
#   scripts/gpu-bundle.sh [DIR]      # default .gpu: inside the repository, ignored by git
#   then, on the GPU machine:  sh .gpu/run.sh [tests] [sanitize] [bench]   (default: all three)
#   (logs into $OUT, or /tmp/gpu-out; each stage fits one device call)
#
# BUILD_DIR (default: build) must be configured with the CUDA toolkit found.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
out=${1:-$root/.gpu}
data=/usr/share/datasets/fashion-mnist
PATH=$PATH:/sbin:/usr/sbin

die() {
    echo "gpu-bundle.sh: $*" >&2
    exit 1
}

grep -q "TESSERA_HAVE_CUDA 1" "$build/tessera_config.h" 2>/dev/null ||
    die "$build was configured without the CUDA toolkit"
[ -f "$data/train-images-idx3-ubyte.gz" ] || die "$data is missing: apt-get install dataset-fashion-mnist"
[ ! -e "$out" ] || [ -f "$out/run.sh" ] || die "$out exists and is no bundle: name another directory"
meson compile -C "$build" tests/gtest_cuda_backend tests/gtest_cuda_training bench/bench-gpu >&2
openblas=$(ldconfig -p | awk '/libopenblas\.so\.0 .*x86-64/ {print $NF; exit}')
[ -n "$openblas" ] || die "no libopenblas.so.0: apt-get install libopenblas0"
# the cuBLAS the programs load, by the major version of the headers they were built with
cublas_major=$(awk '/#define CUBLAS_VER_MAJOR/ {print $3}' \
    "$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")/include/cublas_api.h")
[ -n "$cublas_major" ] || die "cannot read CUBLAS_VER_MAJOR from the toolkit's cublas_api.h"

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/examples" "$out/fashion-mnist" "$out/bench"
cp "$build/tests/gtest_cuda_backend" "$build/tests/gtest_cuda_training" \
    "$build/bench/bench-gpu" "$out/bin/"
cp "$(readlink -f "$openblas")" "$out/lib/libopenblas.so.0"
# every library the programs and OpenBLAS load, but glibc's and those the GPU machine brings
for f in "$out"/bin/* "$out/lib/libopenblas.so.0"; do
    ldd "$f"
done >"$out/ldd.txt"
if grep -q "not found" "$out/ldd.txt"; then
    grep "not found" "$out/ldd.txt" >&2
    die "a library the programs need is missing here"
fi
awk '/=> \// {print $3}' "$out/ldd.txt" | sort -u | while read -r lib; do
    case $(basename "$lib") in
    libc.so* | libm.so* | libmvec.so* | libpthread.so* | libdl.so* | librt.so* | libresolv.so* | \
        libutil.so* | libanl.so* | libnsl.so* | libnss_* | ld-linux* | libstdc++.so* | \
        libgcc_s.so* | libcublas* | libcuda*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
    esac
done
rm "$out/ldd.txt"
cp "$root/examples/fashion-mnist-mlp.yaml" "$root/examples/fashion-mnist-cnn.yaml" \
    "$out/examples/"
cp "$data"/*.gz "$out/fashion-mnist/"
cp "$root/bench/gpu/bench.py" "$root/bench/gpu/peer_torch.py" "$out/bench/"
# under the 64 MiB a device call carries: the libraries compressed (a third of their size)
tar -C "$out" -cJf "$out/lib.tar.xz" lib
rm -rf "$out/lib"

cat >"$out/run.sh" <<RUN
#!/bin/sh
# On the GPU machine, as root: sh run.sh [tests] [sanitize] [bench] (default: all three).
# tests: the gpu suite (every kernel and layer against the CPU backend, 50 steps' loss curve,
# Fashion-MNIST's targets); sanitize: compute-sanitizer's memcheck and racecheck over the
# kernels; bench: bench-gpu beside PyTorch. Logs into \$OUT (default /tmp/gpu-out).
cublas_so=libcublas.so.$cublas_major
RUN
cat >>"$out/run.sh" <<'RUN'
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/gpu-out}
lib=/tmp/tessera-gpu
stages=${*:-tests sanitize bench}
mkdir -p "$out" "$lib"
python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
    "$here/lib.tar.xz" "$lib" || exit 1
# cuBLAS: the CUDA toolkit's, else the nvidia-cublas wheel PyTorch brings
cublas=$(PATH="$PATH:/sbin:/usr/sbin" ldconfig -p | awk -v so="$cublas_so" '$1 == so {print $NF; exit}')
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null); do
    [ -n "$cublas" ] || cublas=$(find -L "$d" -name "$cublas_so*" 2>/dev/null | head -1)
done
[ -n "$cublas" ] || { echo "run.sh: no $cublas_so on this machine" | tee "$out/run.log"; exit 1; }
# the bundle's libraries for Tessera's programs only (python3 keeps its own)
for p in gtest_cuda_backend gtest_cuda_training bench-gpu; do
    printf '#!/bin/sh\nLD_LIBRARY_PATH="%s/lib:%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s/bin/%s" "$@"\n' \
        "$lib" "$(dirname "$cublas")" "$here" "$p" >"$lib/$p"
    chmod +x "$lib/$p"
done
mkdir -p /usr/share/datasets/fashion-mnist
cp -n "$here"/fashion-mnist/*.gz /usr/share/datasets/fashion-mnist/
export TESSERA_SOURCE_DIR="$here" TESSERA_REQUIRE_GPU=1
PATH="$PATH:/usr/local/cuda/bin"
status=0
nvidia-smi >"$out/nvidia-smi.txt" 2>&1
for stage in $stages; do
    case $stage in
    tests)
        "$lib/gtest_cuda_backend" >"$out/backend.log" 2>&1 || status=1
        "$lib/gtest_cuda_training" >"$out/training.log" 2>&1 || status=1
        tail -n 3 "$out/backend.log" "$out/training.log"
        ;;
    sanitize)
        for tool in memcheck racecheck; do
            if ! command -v compute-sanitizer >/dev/null; then
                echo "skipped: compute-sanitizer is not on PATH" >"$out/$tool.log"
                continue
            fi
            compute-sanitizer --tool "$tool" --error-exitcode 3 "$lib/gtest_cuda_backend" \
                >"$out/$tool.log" 2>&1
            rc=$?
            if grep -q "Device not supported" "$out/$tool.log"; then
                echo "skipped: compute-sanitizer does not support this device" >>"$out/$tool.log"
            elif [ "$rc" -ne 0 ]; then
                status=1
            fi
            tail -n 3 "$out/$tool.log"
        done
        ;;
    bench)
        python3 "$here/bench/bench.py" --bench-gpu "$lib/bench-gpu" --rounds 3 \
            >"$out/bench.log" 2>&1 || status=1
        cat "$out/bench.log"
        ;;
    *)
        echo "run.sh: no stage $stage (tests, sanitize, bench)" >&2
        exit 2
        ;;
    esac
done
exit "$status"
RUN
chmod +x "$out/run.sh"
du -sh "$out"
