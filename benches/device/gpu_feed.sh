#!/usr/bin/env bash
# A second call on a lent machine with CUDA (prepared as in scaling.sh:
# .whl/ with our wheel, loaderx 1.7.2, cffi, pycparser): the whole pytest
# suite of the wheel under that machine's Python 3.12, NumPy and PyTorch
# (where torch is installed, the DataLoader's torch test uses it), then the
# GPU feeding loop against loaderx 1.7.2 (benches/python/feed_gpu.py; by
# default pinning in the transform against gathering into pinned tensors
# with allocate=, FEED_VARIANTS to change).
OUT=${OUT:-/tmp/gpu-feed-out}
. "$(dirname "$0")/common.sh"
log "numpy $(python3 -c 'import numpy; print(numpy.__version__)'), torch $(python3 -c 'import torch; print(torch.__version__, torch.cuda.is_available())' 2>&1 | tail -1)"
setup_sides ours ref
[ "${PYTEST_SECS:-200}" = 0 ] || (cd crates/loaderx-py && export LOADERX_REF_PYTHON=/tmp/py-ref PYTHONPATH=/tmp/ours &&
  step pytest "${PYTEST_SECS:-200}" python3 -m pytest -q -p no:cacheprovider -x tests)
step feed "${FEED_SECS:-200}" python3 benches/python/feed_gpu.py --ours /tmp/py-ours --ref /tmp/py-ref \
  --records "${FEED_RECORDS:-2048}" --rounds "${FEED_ROUNDS:-3}" --variants "${FEED_VARIANTS:-pinned,allocate}"
log done
