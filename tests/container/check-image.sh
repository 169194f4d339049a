#!/usr/bin/env bash
# The runtime image (deploy/container) runs as built: it is built with buildah from this build,
# a container's root file system is mounted with podman (no container can start on these
# machines: crun's setrlimit is refused), and a chief, a PS and a worker started from that root
# with chroot as the image's user train the Fashion-MNIST MLP submitted by the image's own
# tessera command, then stop cleanly. Skips (77) without root, buildah or podman.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${TESSERA_BUILD_DIR:?}
driver=${TESSERA_STORAGE_DRIVER:-vfs}
[ "$(id -u)" -eq 0 ] || { echo "needs root (chroot, podman storage): skipping"; exit 77; }
for t in buildah podman chroot; do
  command -v $t >/dev/null || { echo "$t is not installed: skipping"; exit 77; }
done
data=/usr/share/datasets/fashion-mnist
[ -f $data/train-images-idx3-ubyte.gz ] || { echo "no Fashion-MNIST in $data"; exit 1; }

tag=localhost/tessera-test:$$
pods=() cid= root=
cleanup() {
  for p in "${pods[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -n "$cid" ] && podman --storage-driver "$driver" umount "$cid" >/dev/null 2>&1 || true
  [ -n "$cid" ] && podman --storage-driver "$driver" rm -f "$cid" >/dev/null 2>&1 || true
  podman --storage-driver "$driver" rmi -f "$tag" >/dev/null 2>&1 || true
}
trap cleanup EXIT

"$src/deploy/container/build.sh" --build "$build" --tag "$tag" --storage-driver "$driver"
size=$(podman --storage-driver "$driver" image inspect --format '{{.Size}}' "$tag")
user=$(podman --storage-driver "$driver" image inspect --format '{{.Config.User}}' "$tag")
echo "image $tag: $((size / 1048576)) MiB, user $user"
[ "$user" = "65532:65532" ] || { echo "the image does not run as its own user"; exit 1; }
cid=$(podman --storage-driver "$driver" create "$tag")
root=$(podman --storage-driver "$driver" mount "$cid")
# nothing but what the image holds: no shell
[ ! -e "$root/bin/sh" ] && [ ! -e "$root/usr/bin/sh" ] || { echo "the image has a shell"; exit 1; }

# the job and its data inside the container's root
mkdir "$root/data"
cp $data/train-images-idx3-ubyte.gz $data/train-labels-idx1-ubyte.gz \
   $data/t10k-images-idx3-ubyte.gz $data/t10k-labels-idx1-ubyte.gz "$root/data/"
cat > "$root/data/job.yaml" <<'JOB'
name: from-the-image
strategy: parameter_server
model:
  - {dense: {units: 128, activation: relu}, input_shape: [784]}
  - {dense: {units: 10}}
loss: {sparse_categorical_crossentropy: {from_logits: true}}
metrics: [accuracy]
optimizer: {adam: {learning_rate: 0.001}}
data:
  train: {format: idx, images: train-images-idx3-ubyte.gz, labels: train-labels-idx1-ubyte.gz}
  test: {format: idx, images: t10k-images-idx3-ubyte.gz, labels: t10k-labels-idx1-ubyte.gz}
  scale: 0.00392156862745098
  batch_size: 64
  seed: 1
train: {epochs: 1, steps_per_execution: 20}
JOB
chown -R 65532:65532 "$root/data"

logs=$(mktemp -d)
trap 'cleanup; rm -rf "$logs"' EXIT
as_image_user() { chroot --userspec=65532:65532 "$root" "$@"; }
start() { # NAME PROGRAM ARGS...: starts it from the image, waits for its gRPC address
  local name=$1; shift
  # chroot itself, not a shell function, in the background: $! is then the daemon
  chroot --userspec=65532:65532 "$root" /usr/local/bin/"$@" --listen 127.0.0.1:0 \
    --metrics-listen 127.0.0.1:0 2> "$logs/$name.log" &
  pods+=($!)
  for _ in $(seq 100); do
    # the log appears when the background job has opened it: until then, no address (a sed
    # of a missing file would end the script under set -e)
    addr=
    [ -f "$logs/$name.log" ] && addr=$(sed -n 's/.*main: serving gRPC on \([0-9.:]*\).*/\1/p' "$logs/$name.log")
    [ -n "$addr" ] && return 0
    sleep 0.1
  done
  echo "$name did not start:"; cat "$logs/$name.log"; exit 1
}
start ps tessera-ps; ps_addr=$addr
start worker tessera-worker --data-root /data; worker_addr=$addr
start chief tessera-chief --ps "$ps_addr" --worker "$worker_addr"; chief_addr=$addr
out=$(as_image_user /usr/local/bin/tessera submit /data/job.yaml --chief "$chief_addr" --watch)
echo "$out" | tail -2
acc=$(echo "$out" | sed -n 's/.*test accuracy \([0-9.]*\)$/\1/p' | tail -1)
awk -v a="$acc" 'BEGIN { exit !(a >= 0.80) }' || { echo "test accuracy '$acc' < 0.80"; exit 1; }
# a clean stop of each
status=0
for p in "${pods[@]}"; do
  kill -TERM "$p"
  wait "$p" || { echo "a daemon did not stop cleanly (exit $?)"; status=1; }
done
pods=()
[ $status -eq 0 ] && echo "the image trained the MLP to $acc and stopped cleanly"
exit $status
