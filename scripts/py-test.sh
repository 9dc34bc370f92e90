#!/usr/bin/env bash
# Builds the `loaderx` Python wheel (crates/loaderx-py) into a venv and runs
# its pytest suite, including interop with loaderx 1.7.2 (scripts/ref-venv.sh).
#
#   scripts/py-test.sh            build the abi3 wheel (dev profile), install it, run pytest
#   scripts/py-test.sh --ref      also run the shared tests on loaderx 1.7.2 itself
#   LOADERX_PY_PROFILE=release    build with another cargo profile
#
# The venv lives at target/py-venv (override: LOADERX_PY_VENV) and is reused.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${LOADERX_PY_VENV:-$root/target/py-venv}
profile=${LOADERX_PY_PROFILE:-dev}

if [ ! -x "$venv/bin/maturin" ] || ! "$venv/bin/python" -c 'import numpy, pytest' 2>/dev/null; then
  command -v python3 >/dev/null || { echo "py-test: python3 not found" >&2; exit 1; }
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check maturin numpy pytest
fi

ref=$(bash "$root/scripts/ref-venv.sh")

wheels="$root/target/wheels/loaderx-py"
rm -rf "$wheels"
"$venv/bin/maturin" build --quiet --profile "$profile" \
  --manifest-path "$root/crates/loaderx-py/Cargo.toml" \
  --interpreter "$venv/bin/python" --out "$wheels"
wheel=$(ls "$wheels"/loaderx-*.whl)
"$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$wheel"

cd "$root/crates/loaderx-py"
LOADERX_REF_PYTHON="$ref" "$venv/bin/python" -m pytest -q -p no:cacheprovider tests

if [ "${1:-}" = "--ref" ]; then
  "$ref" -c 'import pytest' 2>/dev/null || "$ref" -m pip install -q --disable-pip-version-check pytest
  LOADERX_SUITE=ref "$ref" -m pytest -q -p no:cacheprovider tests
fi
