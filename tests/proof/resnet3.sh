#!/bin/sh
# The small ResNet of examples/fashion-mnist-resnet3.yaml (three residual blocks with
# BatchNormalization, Keras's Functional JSON) reaches 91% test accuracy on Fashion-MNIST in
# ten epochs, on one device and on a cluster of 2 parameter servers and 2 workers (its moving
# statistics on the parameter servers). About four minutes on a 2-core machine: suite slow,
#
#   meson test -C build --setup slow --suite slow resnet3
set -eu

build=$TESSERA_BUILD_DIR
src=$TESSERA_SOURCE_DIR
dir=$(mktemp -d /tmp/tessera-resnet3.XXXXXX)
trap 'rm -rf "$dir"' EXIT
cp "$src/examples/fashion-mnist-resnet3.yaml" "$src/examples/fashion-mnist-resnet3.json" "$dir/"
sed 's/^strategy: one_device/strategy: parameter_server/' "$dir/fashion-mnist-resnet3.yaml" \
    > "$dir/resnet3-ps.yaml"

# the test accuracy of the result line a run printed last
accuracy() {
    sed -n 's/.*test accuracy \([0-9.]*\).*/\1/p' "$1" | tail -1
}
check() { # NAME LOG
    acc=$(accuracy "$2")
    echo "$1: test accuracy ${acc:-none}"
    if [ -z "$acc" ] || ! awk -v a="$acc" 'BEGIN { exit !(a >= 0.91) }'; then
        echo "FAIL: $1 ended below 91% test accuracy" >&2
        tail -3 "$2" >&2
        exit 1
    fi
}

"$build/tessera" train "$dir/fashion-mnist-resnet3.yaml" --threads 2 > "$dir/one.log" 2>&1
check one_device "$dir/one.log"
"$build/tessera" run --local --ps 2 --workers 2 "$dir/resnet3-ps.yaml" > "$dir/ps.log" 2>&1
check "parameter_server (2 PS, 2 workers)" "$dir/ps.log"
