#!/usr/bin/env bash
# Installs what Tessera needs on Debian 12 (bookworm), as root, non-interactively.
# Idempotent: packages already present are left alone.
set -euo pipefail

packages=(
  build-essential meson ninja-build pkg-config clang-format
  libgrpc-dev protobuf-c-compiler libprotobuf-c-dev
  libsystemd-dev check libopenblas-dev zlib1g-dev
  libyaml-dev libcjson-dev libmicrohttpd-dev libhdf5-dev libzip-dev
  prometheus iperf3 python3 python3-venv dataset-fashion-mnist systemd iproute2
  libssl-dev openssl python3-grpcio buildah podman
  clang libclang-rt-14-dev
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
    missing+=("$p")
done

if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup-deps: missing packages: ${missing[*]} (run as root to install them)" >&2
    exit 1
  fi
  echo "setup-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# kubectl renders deploy/k8s with its built-in kustomize (tests/k8s): Debian's
# kubernetes-client, unless a kubectl from elsewhere is installed already.
if ! command -v kubectl >/dev/null; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup-deps: kubectl is missing (run as root to install kubernetes-client)" >&2
    exit 1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends kubernetes-client
fi
