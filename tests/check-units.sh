#!/usr/bin/env bash
# The shipped systemd units pass `systemd-analyze verify` (with the built programs standing in
# for the installed ones), with and without the mutual-TLS drop-ins of deploy/systemd/tls/, and
# `systemd-analyze security` rates each at most 2.0 ("OK"). Skips (77) where systemd-analyze is
# not installed.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${TESSERA_BUILD_DIR:?}
command -v systemd-analyze >/dev/null || { echo "systemd-analyze not installed: skipping"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
units=(tessera-ps@.service:tessera-ps@0.service tessera-worker@.service:tessera-worker@0.service
       tessera-chief.service)
verify() {
  (cd "$1" && systemd-analyze verify --man=no --recursive-errors=no "${units[@]/#/./}")
}
mkdir "$tmp/plain" "$tmp/tls"
for d in plain tls; do
  cp "$src"/deploy/systemd/*.service "$tmp/$d"/
  sed -i "s|/usr/local/bin/|$build/|" "$tmp/$d"/*.service
done
cp -r "$src"/deploy/systemd/tls/*.d "$tmp/tls"/
verify "$tmp/plain"
echo "units verified"
verify "$tmp/tls"
echo "units with the TLS drop-ins verified"
status=0
for u in tessera-ps@.service tessera-worker@.service tessera-chief.service; do
  line=$(cd "$tmp/plain" && systemd-analyze security --offline=yes --no-pager "./$u" 2>&1 |
         grep 'Overall exposure level')
  score=$(sed -E 's/.*: ([0-9.]+) .*/\1/' <<<"$line")
  echo "$u: exposure $score (target <= 2.0)"
  awk -v s="$score" 'BEGIN { exit !(s <= 2.0) }' || status=1
done
exit $status
