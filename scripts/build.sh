#!/usr/bin/env bash
# Installs what is missing (as root), configures the meson build in ./build and compiles it.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-deps.sh
if [ ! -f build/build.ninja ]; then
  meson setup build -Dwerror=true
fi
meson compile -C build
