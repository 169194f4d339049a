#!/usr/bin/env bash
# Builds Tessera's runtime image (deploy/container/Containerfile) with buildah from a build
# directory: stages a root file system with the four programs, the shared libraries they load
# (ldd, symbolic links resolved), the dynamic loader, a tessera user (65532) and the
# directories it writes, then `buildah bud` copies it into an image FROM scratch.
#
#   deploy/container/build.sh [--build DIR] [--tag NAME] [--storage-driver DRIVER]
#
# Defaults: --build build, --tag localhost/tessera:<version>. Prints the image id last.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build
tag=
storage=()
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --storage-driver) storage=(--storage-driver "$2"); shift 2 ;;
    *) echo "build.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
programs=(tessera tessera-ps tessera-worker tessera-chief)
for p in "${programs[@]}"; do
  [ -x "$build/$p" ] || { echo "build.sh: $build/$p is not built" >&2; exit 1; }
done
version=$("$build/tessera" --version | awk '{print $2}')
tag=${tag:-localhost/tessera:$version}
command -v buildah >/dev/null || { echo "build.sh: buildah is not installed" >&2; exit 1; }

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
rootfs=$ctx/rootfs
mkdir -p "$rootfs/usr/local/bin" "$rootfs/etc" "$rootfs/tmp" "$rootfs/var/lib/tessera"
for p in "${programs[@]}"; do
  install -m 0755 -s "$build/$p" "$rootfs/usr/local/bin/$p"
done
# every library the programs load, at the path the loader looks for it: what they link, and
# OpenBLAS, which the engine opens at run time (engine/blas.c), with what it links
# awk reads to the end: one that exits at the first match makes ldconfig die of SIGPIPE, which
# pipefail turns into a failure whenever ldconfig was still writing
openblas=$(ldconfig -p | awk '/libopenblas\.so\.0 .*x86-64/ && !found {print $NF; found = 1}')
[ -n "$openblas" ] || { echo "build.sh: libopenblas.so.0 not found (install libopenblas0)" >&2; exit 1; }
{ ldd "${programs[@]/#/$build/}" "$openblas"; echo "$openblas => $openblas (0x0)"; } |
  awk '/=> \// {print $3} /^\t\/[^ ]+ \(/ {print $1}' | sort -u |
  while read -r lib; do
    mkdir -p "$rootfs$(dirname "$lib")"
    cp -L "$lib" "$rootfs$lib"
  done
printf 'root:x:0:0:root:/:/nonexistent\ntessera:x:65532:65532:Tessera:/var/lib/tessera:/nonexistent\n' \
  > "$rootfs/etc/passwd"
printf 'root:x:0:\ntessera:x:65532:\n' > "$rootfs/etc/group"
chmod 1777 "$rootfs/tmp"
chown 65532:65532 "$rootfs/var/lib/tessera"
cp "$here/Containerfile" "$ctx/Containerfile"
buildah "${storage[@]}" bud --quiet --layers=false -t "$tag" "$ctx" | tail -1
