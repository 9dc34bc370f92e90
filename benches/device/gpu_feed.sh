#!/usr/bin/env bash
# A second call on a lent machine with CUDA (prepared as in scaling.sh:
# .whl/ with our wheel, loaderx 1.7.2, cffi, pycparser): the whole pytest
# suite of the wheel under that machine's Python 3.12, NumPy and PyTorch
# (where torch is installed, the DataLoader's torch test uses it), then the
# GPU feeding loop against loaderx 1.7.2 (benches/python/feed_gpu.py).
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-feed-out}
mkdir -p "$OUT"
log() { echo "== $(date +%T) $*" | tee -a "$OUT/summary.txt"; }
log "host: $(nproc) cpus, $(python3 -V 2>&1), numpy $(python3 -c 'import numpy; print(numpy.__version__)'), torch $(python3 -c 'import torch; print(torch.__version__, torch.cuda.is_available())' 2>&1 | tail -1)"
log "THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>&1)"
pipi() { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$@"; }
pipi /tmp/ours .whl/loaderx-*rust*.whl || log "install ours failed"
pipi /tmp/ref .whl/loaderx-1.7.2-py3-*.whl .whl/cffi-*.whl .whl/pycparser-*.whl || log "install ref failed"
for side in ours ref; do
  printf '#!/bin/sh\nPYTHONPATH=/tmp/%s exec python3 "$@"\n' "$side" > /tmp/py-$side
  chmod +x /tmp/py-$side
done
step() {  # step NAME SECONDS CMD...
  local name=$1 secs=$2; shift 2
  log "start $name (limit ${secs}s)"
  timeout "$secs" "$@" > "$OUT/$name.log" 2>&1
  log "end $name rc=$?"
  tail -n 25 "$OUT/$name.log" >> "$OUT/summary.txt"
}
[ "${PYTEST_SECS:-200}" = 0 ] || (cd crates/loaderx-py && export LOADERX_REF_PYTHON=/tmp/py-ref PYTHONPATH=/tmp/ours &&
  step pytest "${PYTEST_SECS:-200}" python3 -m pytest -q -p no:cacheprovider -x tests)
step feed "${FEED_SECS:-200}" python3 benches/python/feed_gpu.py --ours /tmp/py-ours --ref /tmp/py-ref \
  --records "${FEED_RECORDS:-2048}" --rounds "${FEED_ROUNDS:-3}" --variants "${FEED_VARIANTS:-plain}"
log done
