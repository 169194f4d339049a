#!/bin/sh
# Runs one compat check (tests/compat/check_NAME.py) under the project-local virtual environment
# .venv-compat, made on first use with the packages PyPI serves: the real readers and writers of
# the formats Tessera writes (TensorBoard, safetensors, TensorFlow; later Keras).
#
#   tests/compat/run.sh NAME
#
# Exit status 77 (meson: skipped) only when the packages cannot be installed, with the reason.
set -eu

name=$1
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
venv=${TESSERA_COMPAT_VENV:-$root/.venv-compat}
# Pinned: the versions these checks were written against.
packages="tensorboard==2.21.0 safetensors==0.8.0 tensorflow-cpu==2.21.0"

# One installer at a time: meson runs the compat checks in parallel.
exec 9>"$root/.venv-compat.lock"
flock 9
if [ ! -f "$venv/.installed" ] || [ "$(cat "$venv/.installed")" != "$packages" ]; then
    rm -rf "$venv"
    if ! /usr/bin/python3 -m venv "$venv" >"$root/.venv-compat.log" 2>&1 ||
        ! "$venv/bin/pip" install --disable-pip-version-check -q $packages \
            >>"$root/.venv-compat.log" 2>&1; then
        echo "skipped: cannot install $packages into $venv (PyPI unreachable, or python3-venv" \
            "missing); see $root/.venv-compat.log:" >&2
        tail -5 "$root/.venv-compat.log" >&2
        exit 77
    fi
    echo "$packages" >"$venv/.installed"
fi
flock -u 9
exec "$venv/bin/python" "$here/check_$name.py"
