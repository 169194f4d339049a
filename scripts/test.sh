#!/usr/bin/env bash
# Builds and runs every test suite (unit, integration, and gpu when a GPU is visible; GPU tests
# skip themselves with exit 77 otherwise), then prints one summary line counting test cases.
set -uo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh || exit 1

status=0
meson test -C build --print-errorlogs --num-processes 2 || status=$?

/usr/bin/python3 scripts/test-summary.py build/meson-logs/testlog.json || status=1
exit "$status"
