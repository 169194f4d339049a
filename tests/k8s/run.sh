#!/bin/sh
# Runs tests/k8s/check_manifests.py under the project-local virtual environment .venv-k8s, made
# on first use with kubernetes-validate from PyPI. Exit 77 (meson: skipped) only when PyPI
# cannot be reached, or kubectl (Debian's kubernetes-client, for its kustomize) is missing.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
venv=${TESSERA_K8S_VENV:-$root/.venv-k8s}
packages="kubernetes-validate==1.37.0 PyYAML"
command -v kubectl >/dev/null || { echo "skipped: kubectl is not installed" >&2; exit 77; }
if [ ! -f "$venv/.installed" ] || [ "$(cat "$venv/.installed")" != "$packages" ]; then
    rm -rf "$venv"
    if ! /usr/bin/python3 -m venv "$venv" >"$root/.venv-k8s.log" 2>&1 ||
        ! "$venv/bin/pip" install --disable-pip-version-check -q $packages \
            >>"$root/.venv-k8s.log" 2>&1; then
        echo "skipped: cannot install $packages into $venv; see $root/.venv-k8s.log:" >&2
        tail -5 "$root/.venv-k8s.log" >&2
        exit 77
    fi
    echo "$packages" >"$venv/.installed"
fi
exec "$venv/bin/python" "$here/check_manifests.py"
