#!/usr/bin/env bash
# Builds and runs every test suite (unit, integration, and gpu when a GPU is visible; GPU tests
# skip themselves with exit 77 otherwise), then the short fuzz runs (suite fuzz, about half a
# minute) in a clang build of their own, build-fuzz, and prints one summary line counting the
# test cases of both.
set -uo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh || exit 1

status=0
meson test -C build --print-errorlogs --num-processes 2 || status=$?

# The fuzz targets need clang and libFuzzer (scripts/setup-deps.sh installs them). A fuzz build
# that cannot be set up or compiled leaves no test log, which the summary counts as a failure.
rm -f build-fuzz/meson-logs/testlog.json
if { [ -f build-fuzz/build.ninja ] ||
     CC=clang meson setup build-fuzz -Dfuzz=true -Db_sanitize=address,undefined \
       -Db_lundef=false -Dbuildtype=debugoptimized; } &&
   meson compile -C build-fuzz; then
  meson test -C build-fuzz --suite fuzz --print-errorlogs --num-processes 2 || status=1
else
  echo "test.sh: the fuzz build (build-fuzz) failed" >&2
  status=1
fi

/usr/bin/python3 scripts/test-summary.py build/meson-logs/testlog.json \
  build-fuzz/meson-logs/testlog.json || status=1
exit "$status"
