#!/usr/bin/env bash
# The main job: install, build, then start a whole Tessera cluster on this machine
# (a chief, two parameter servers, two workers on 127.0.0.1), show its health and stop it.
# Pass --keep to leave it running until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
exec ./build/tessera run --local --ps 2 --workers 2 "$@"
