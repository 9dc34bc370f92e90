"""Per-call cost of small appends: one 4 KiB record per `append` call, and
the same records in batches, for ours and loaderx 1.7.2 in the same run.
Two figures per cell, each divided by the records written, best of 3
stores: the append loop alone, and the whole write from store creation to
`close()` (which makes the store durable).

Our default durability, "at_sync", defers like loaderx 1.7.2: an append
fsyncs nothing, and close() makes the store durable. "each_append" makes
every append durable on return (three fsyncs per call), so a loop of
one-record appends measures the disk's flush latency.

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
kw = {"durability": sys.argv[3]} if len(sys.argv) > 3 else {}
x = np.random.default_rng(0).integers(0, 255, size=(n, 4096), dtype=np.uint8)
d = tempfile.mkdtemp(dir=sys.argv[2])
out = []
for codec in ("raw", "zstd"):
    loop = total = float("inf")
    for r in range(3):
        t0 = time.perf_counter()
        with DenseStore(f"{d}/{codec}{r}", np.uint8, (4096,), codec=codec, **kw) as ds:
            t1 = time.perf_counter()
            for i in range(0, n, batch):
                ds.append(x[i:i + batch])
            t2 = time.perf_counter()
        t3 = time.perf_counter()
        loop, total = min(loop, t2 - t1), min(total, t3 - t0)
    out += [loop / n * 1e6, total / n * 1e6]
shutil.rmtree(d)
print(" ".join(f"{v:.2f}" for v in out))
"""


def main():
    ours, ref = sys.argv[1], sys.argv[2]
    tmp = sys.argv[3] if len(sys.argv) > 3 else "target/bench-tmp"
    print("| records per append | codec | ref loop us/record | ours loop | ref / ours "
          "| ref to close | ours to close | ref / ours | ours each_append, to close | ref / it |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    runs = (("ref", ref, []), ("at_sync", ours, ["at_sync"]),
            ("each_append", ours, ["each_append"]))
    for batch in (1, 16, 256):
        res = {}
        for name, py, extra in runs:
            r = subprocess.run([py, "-c", CHILD, str(batch), tmp, *extra],
                               check=True, capture_output=True, text=True)
            res[name] = [float(v) for v in r.stdout.split()]
        for k, codec in enumerate(("raw", "zstd")):
            rl, rt = res["ref"][2 * k:2 * k + 2]
            ol, ot = res["at_sync"][2 * k:2 * k + 2]
            et = res["each_append"][2 * k + 1]
            print(f"| {batch} | {codec} | {rl:.2f} | {ol:.2f} | {rl / ol:.2f}x "
                  f"| {rt:.2f} | {ot:.2f} | {rt / ot:.2f}x | {et:.2f} | {rt / et:.2f}x |")


if __name__ == "__main__":
    main()
