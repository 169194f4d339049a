#!/usr/bin/env bash
# The shipped systemd units pass `systemd-analyze verify` (with the built programs standing in
# for the installed ones). Skips (77) where systemd-analyze is not installed.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${TESSERA_BUILD_DIR:?}
command -v systemd-analyze >/dev/null || { echo "systemd-analyze not installed: skipping"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$src"/deploy/systemd/*.service "$tmp"/
sed -i "s|/usr/local/bin/|$build/|" "$tmp"/*.service
cd "$tmp"
systemd-analyze verify --man=no --recursive-errors=no \
  ./tessera-ps@.service:tessera-ps@0.service \
  ./tessera-worker@.service:tessera-worker@0.service \
  ./tessera-chief.service
echo "units verified"
