#!/usr/bin/env bash
# The main job: install, build, then start a whole Tessera cluster on this machine (a chief, two
# parameter servers, two workers on 127.0.0.1), train the Fashion-MNIST MLP on it with
# parameter-server training, print the result and stop the cluster. Extra arguments go to
# `tessera run` (e.g. --keep to leave the cluster running until Ctrl-C).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
exec ./build/tessera run --local --ps 2 --workers 2 "$@" examples/fashion-mnist-mlp.yaml
