# Shared by the scripts in this folder (sourced; run on the lent machine
# from the repository root): logging under $OUT, the two packages (and,
# given "ceil", python-zstandard) installed from .whl/ into /tmp/<side>,
# a /tmp/py-<side> interpreter wrapper for each, and `step`, which runs one
# command under a time limit with its log under $OUT.
set -u
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
log() { echo "== $(date +%T) $*" | tee -a "$OUT/summary.txt"; }
log "host: $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(free -g | awk '/Mem:/{print $2}') GiB, $(python3 -V 2>&1), load $(cut -d' ' -f1-3 /proc/loadavg)"
log "THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>&1) defrag: $(cat /sys/kernel/mm/transparent_hugepage/defrag 2>&1)"
pipi() { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$@"; }
setup_sides() {  # setup_sides ours ref [ceil]
  local side
  pipi /tmp/ours .whl/loaderx-*rust*.whl || log "install ours failed"
  pipi /tmp/ref .whl/loaderx-1.7.2-py3-*.whl .whl/cffi-*.whl .whl/pycparser-*.whl || log "install ref failed"
  case " $* " in *" ceil "*) pipi /tmp/ceil .whl/zstandard-*.whl || log "install zstandard failed" ;; esac
  for side in "$@"; do
    printf '#!/bin/sh\nPYTHONPATH=/tmp/%s exec python3 "$@"\n' "$side" > "/tmp/py-$side"
    chmod +x "/tmp/py-$side"
  done
  /tmp/py-ours -c 'import loaderx.zrecord as z; print("ours", z.__file__)' 2>&1 | tee -a "$OUT/summary.txt"
  /tmp/py-ref -c 'import loaderx.zrecord as z; print("ref", z.__file__)' 2>&1 | tee -a "$OUT/summary.txt"
}
step() {  # step NAME SECONDS CMD...
  local name=$1 secs=$2; shift 2
  log "start $name (limit ${secs}s)"
  timeout "$secs" "$@" > "$OUT/$name.log" 2>&1
  log "end $name rc=$? ; load $(cut -d' ' -f1-3 /proc/loadavg)"
  tail -n 40 "$OUT/$name.log" >> "$OUT/summary.txt"
}
