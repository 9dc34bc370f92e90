#!/usr/bin/env bash
# One call on a lent 16-core machine (the `device` tool): the Python rows
# against loaderx 1.7.2 and the native benches, to see how the compressed
# paths scale past this project's 2-core dev box. Prepared here, run there:
#   .whl/    our release wheel, loaderx-1.7.2, cffi, pycparser, zstandard
#            (cp312 wheels: the machine's python3 is 3.12 with numpy)
#   .devbin/ release builds of benches/src/bin/{loader,ragged_gather,engine_gather}
# Each step has its own time limit and log under $OUT; a failed step does not
# stop the next one. To prepare, from the repository root:
#   cargo build --release -p benches --bins
#   mkdir -p .devbin && for b in loader ragged_gather engine_gather; do
#     cp target/release/$b .devbin/ && strip .devbin/$b; done
#   mkdir -p .whl && cp <our release wheel> .whl/
#   python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     -d .whl loaderx==1.7.2 cffi==2.1.1 pycparser==3.12 zstandard==0.25.0
# then run this script there with carry [".whl", ".devbin"] (about 5 minutes).
OUT=${OUT:-/tmp/scaling-out}
. "$(dirname "$0")/common.sh"
setup_sides ours ref ceil
py_rows=${PY_ROWS:-loader-*,gather-256-zstd*,gather-4-zstd*,ragged-*,gather-256-raw,gather-4-raw}
mkdir -p /tmp/pybench
step python "${PY_SECS:-260}" python3 benches/python/bench_vs_reference.py \
  --ours /tmp/py-ours --ref /tmp/py-ref --ceiling /tmp/py-ceil \
  --rows "$py_rows" --rounds "${PY_ROUNDS:-5}" --json "$OUT/rows.json" --dir /tmp/pybench
step loader "${LOADER_SECS:-120}" .devbin/loader
step ragged "${RAGGED_SECS:-90}" .devbin/ragged_gather
step engine "${ENGINE_SECS:-60}" .devbin/engine_gather --quick
log done
