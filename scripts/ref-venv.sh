#!/usr/bin/env bash
# Prints the path of a Python interpreter that has the reference package
# (loaderx==1.7.2) and numpy installed, creating the venv on first use.
# Tests use it as a live interop peer. It fails loudly if Python or pip is
# missing: interop is never skipped silently.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${ZRECORD_REF_VENV:-$root/target/ref-venv}
lock="$root/target/ref-venv.lock"
mkdir -p "$root/target"
exec 9>"$lock"
flock 9
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import loaderx, numpy' 2>/dev/null; then
  command -v python3 >/dev/null || { echo "ref-venv: python3 not found" >&2; exit 1; }
  python3 -m venv "$venv" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check 'loaderx==1.7.2' numpy >&2
  "$venv/bin/python" -c 'import loaderx.zrecord, numpy' >&2
fi
echo "$venv/bin/python"
