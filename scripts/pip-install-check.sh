#!/usr/bin/env bash
# Checks the README's install command, `pip install .` from the repository
# root, the way a user runs it: through pyproject.toml and maturin's PEP 517
# backend, into a fresh venv, then imports the package outside the source
# tree and round-trips a store. py-test.sh builds the wheel with maturin
# directly, so only this step would notice a broken pyproject.toml.
#
# Built with the dev profile into this checkout's target/ (what the other
# steps already compiled), so it costs seconds; the release build a user
# gets is the same code under another profile.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=$root/target/pip-install-venv
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check numpy
CARGO_TARGET_DIR=$root/target MATURIN_PEP517_ARGS="--profile dev" \
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "$root"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cd "$scratch"
"$venv/bin/python" - <<'EOF'
import os
import numpy as np
import loaderx
from loaderx.dataloader import DataLoader
from loaderx.zrecord import DenseStore, RaggedStore

here = os.getcwd()
# The installed package, not a source checkout on the path.
assert "site-packages" in loaderx.__file__, loaderx.__file__
data = np.arange(24, dtype="<f4").reshape(8, 3)
with DenseStore(os.path.join(here, "dense"), dtype="float32", item_shape=(3,), codec="zstd") as ds:
    ds.append(data)
with DenseStore(os.path.join(here, "dense")) as ds:
    assert np.array_equal(ds[[7, 0]], data[[7, 0]])
with RaggedStore(os.path.join(here, "ragged"), dtype="int32", codec="raw") as rs:
    rs.append([np.arange(n, dtype="<i4") for n in range(1, 9)])
    loader = DataLoader({"x": rs}, num_workers=1, batch_size=4, mode=0)
    batch = next(iter(loader))
    loader.close()
    assert [len(r) for r in batch["x"]] == [1, 2, 3, 4], batch
print(f"pip install . ok: loaderx {loaderx.__version__} from {os.path.dirname(loaderx.__file__)}")
EOF
