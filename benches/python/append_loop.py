"""Per-call cost of small appends: one 4 KiB record per `append` call, and
the same records in batches, for ours and loaderx 1.7.2 in the same run.

Every append of ours is a power-loss-safe commit: the payload and location
bytes are fsynced before the header that names them is written (two fsyncs
per call). loaderx 1.7.2 writes without fsyncing. So a loop of one-record
appends measures the disk's flush latency on our side.

Run (each interpreter must import `loaderx`):

    python3 benches/python/append_loop.py target/pyperf-venv/bin/python \\
        "$(bash scripts/ref-venv.sh)"
"""

import subprocess
import sys

CHILD = r"""
import numpy as np, shutil, sys, tempfile, time
from loaderx.zrecord import DenseStore
n, batch = 2000, int(sys.argv[1])
x = np.random.default_rng(0).integers(0, 255, size=(n, 4096), dtype=np.uint8)
d = tempfile.mkdtemp(dir=sys.argv[2])
out = []
for codec in ("raw", "zstd"):
    best = float("inf")
    for r in range(3):
        with DenseStore(f"{d}/{codec}{r}", np.uint8, (4096,), codec=codec) as ds:
            t = time.perf_counter()
            for i in range(0, n, batch):
                ds.append(x[i:i + batch])
            best = min(best, time.perf_counter() - t)
    out.append(best / n * 1e6)
shutil.rmtree(d)
print(" ".join(f"{v:.2f}" for v in out))
"""


def main():
    ours, ref = sys.argv[1], sys.argv[2]
    tmp = sys.argv[3] if len(sys.argv) > 3 else "target/bench-tmp"
    print("| records per append | codec | loaderx 1.7.2 us/record | ours us/record | ours / ref time |")
    print("|---:|---|---:|---:|---:|")
    for batch in (1, 16, 256):
        res = {}
        for name, py in (("ref", ref), ("ours", ours)):
            r = subprocess.run([py, "-c", CHILD, str(batch), tmp], check=True,
                               capture_output=True, text=True)
            res[name] = [float(v) for v in r.stdout.split()]
        for k, codec in enumerate(("raw", "zstd")):
            a, b = res["ref"][k], res["ours"][k]
            print(f"| {batch} | {codec} | {a:.2f} | {b:.2f} | {b / a:.2f}x |")


if __name__ == "__main__":
    main()
