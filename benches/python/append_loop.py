"""Per-call cost of small appends: one 4 KiB record per `append` call, and
the same records in batches, for ours and loaderx 1.7.2 in the same run.
Two figures per cell, each divided by the records written, best of 3
stores: the append loop alone, and the whole write from store creation to
`close()` (which makes the store durable).

Our default durability, "at_sync", defers like loaderx 1.7.2: an append
fsyncs nothing, and close() makes the store durable. "each_append" makes
every append durable on return (three fsyncs per call), so a loop of
one-record appends measures the disk's flush latency.

`--sustained` instead appends 60 x 2,048 records, 256 per call, into one
store (480 MiB) and prints the loop's cost per record for each package,
alternating 4 times, each run after a `sync` and 3 s of rest: the regime of
a long ingestion. On this VM it is dominated by the write-back of earlier
runs (one build ranges over 5x between runs); read it as a sanity check.

`--ragged` appends 4,096 int32 sequences (the lognormal lengths of
`bench_vs_reference.py`'s ragged rows, median ~250 elements) to a fresh
ragged store, 1, 16 or 256 per call, raw and zstd, and prints the loop's
cost per record (best of 3 stores, each package in its own process, 3
alternating runs, the best kept).

`--sync-each` times a `sync()` after every call instead: one 64-byte record
appended, or one index deleted, or nothing, then `sync()`, 50 times on a
1,000-record raw store (best of 3 loops per process, 3 processes per package,
alternating): the cost of making each small change durable.

Run (each interpreter must import `loaderx`):

    python3 benches/python/append_loop.py target/pyperf-venv/bin/python \\
        "$(bash scripts/ref-venv.sh)"
"""

import os
import subprocess
import sys
import time

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


SUSTAINED = r"""
import numpy as np, shutil, sys, tempfile, time
from loaderx.zrecord import DenseStore
n = 2048
x = np.random.default_rng(0).integers(0, 255, size=(n, 4096), dtype=np.uint8)
d = tempfile.mkdtemp(dir=sys.argv[1])
with DenseStore(f"{d}/raw", np.uint8, (4096,), codec="raw") as ds:
    t = time.perf_counter()
    for r in range(60):
        for i in range(0, n, 256):
            ds.append(x[i:i + 256])
    loop = time.perf_counter() - t
shutil.rmtree(d)
print(f"{loop / (60 * n) * 1e6:.2f}")
"""


SYNC_EACH = r"""
import numpy as np, shutil, sys, tempfile, time
from loaderx.zrecord import DenseStore
x = np.zeros((1000, 64), np.uint8)
d = tempfile.mkdtemp(dir=sys.argv[1])
ds = DenseStore(f"{d}/s", np.uint8, (64,), codec="raw")
ds.append(x)
ds.sync()
best = {"append": float("inf"), "delete": float("inf"), "nothing": float("inf")}
for r in range(3):
    for what in best:
        t = time.perf_counter()
        for i in range(50):
            if what == "append":
                ds.append(x[:1])
            elif what == "delete":
                ds.delete(i)
            ds.sync()
        best[what] = min(best[what], (time.perf_counter() - t) / 50)
ds.close()
shutil.rmtree(d)
print(" ".join(f"{v * 1e6:.2f}" for v in best.values()))
"""


RAGGED = r"""
import numpy as np, os, shutil, sys, tempfile, time
sys.path.insert(0, os.path.dirname(sys.argv[3]))
from bench_vs_reference import ragged_data
from loaderx.zrecord import RaggedStore
batch = int(sys.argv[1])
recs = ragged_data(np, 4096)
d = tempfile.mkdtemp(dir=sys.argv[2])
out = []
for codec in ("raw", "zstd"):
    best = float("inf")
    for r in range(3):
        with RaggedStore(f"{d}/{codec}{r}", np.int32, codec=codec) as rs:
            t = time.perf_counter()
            for i in range(0, len(recs), batch):
                rs.append(recs[i:i + batch])
            best = min(best, time.perf_counter() - t)
    out.append(best / len(recs) * 1e6)
shutil.rmtree(d)
print(" ".join(f"{v:.2f}" for v in out))
"""


def ragged(ours, ref, tmp):
    me = os.path.abspath(__file__)
    print("| records per append | codec | loaderx 1.7.2 us/record | ours us/record | ref / ours |")
    print("|---:|---|---:|---:|---:|")
    for batch in (1, 16, 256):
        res = {"ref": [], "ours": []}
        for _ in range(3):
            for name, py in (("ref", ref), ("ours", ours)):
                r = subprocess.run([py, "-c", RAGGED, str(batch), tmp, me],
                                   check=True, capture_output=True, text=True)
                res[name].append([float(v) for v in r.stdout.split()])
        for k, codec in enumerate(("raw", "zstd")):
            rv = min(v[k] for v in res["ref"])
            ov = min(v[k] for v in res["ours"])
            print(f"| {batch} | {codec} | {rv:.2f} | {ov:.2f} | {rv / ov:.2f}x |")


def sync_each(ours, ref, tmp):
    res = {"ref": [], "ours": []}
    for _ in range(3):
        for name, py in (("ref", ref), ("ours", ours)):
            r = subprocess.run([py, "-c", SYNC_EACH, tmp], check=True,
                               capture_output=True, text=True)
            res[name].append([float(v) for v in r.stdout.split()])
    print("| call, then sync() | loaderx 1.7.2 us | ours us | ref / ours |")
    print("|---|---:|---:|---:|")
    for k, what in enumerate(("append 1 record", "delete 1 index",
                              "nothing (a sync with nothing to write)")):
        rv = min(v[k] for v in res["ref"])
        ov = min(v[k] for v in res["ours"])
        print(f"| {what} | {rv:.1f} | {ov:.1f} | {rv / max(ov, 0.01):.2f}x |")


def sustained(ours, ref, tmp):
    print("| round | loaderx 1.7.2 us/record | ours us/record | ref / ours |")
    print("|---:|---:|---:|---:|")
    for k in range(4):
        res = {}
        for name, py in (("ref", ref), ("ours", ours)):
            os.sync()
            time.sleep(3)
            r = subprocess.run([py, "-c", SUSTAINED, tmp], check=True,
                               capture_output=True, text=True)
            res[name] = float(r.stdout)
        print(f"| {k + 1} | {res['ref']:.2f} | {res['ours']:.2f} | {res['ref'] / res['ours']:.2f}x |")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    ours, ref = args[0], args[1]
    tmp = args[2] if len(args) > 2 else "target/bench-tmp"
    os.makedirs(tmp, exist_ok=True)
    if "--sync-each" in sys.argv:
        sync_each(ours, ref, tmp)
        return
    if "--ragged" in sys.argv:
        ragged(ours, ref, tmp)
        return
    if "--sustained" in sys.argv:
        sustained(ours, ref, tmp)
        return
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
