"""Delete and compaction through the Python API, ours and loaderx 1.7.2 in
the same run, on identical stores built by each package from the same
seeded data:

- dense: 1,000,000 records of (8,) int32, raw;
- ragged: 200,000 int32 records of 1..64 elements, zstd.

Each scenario deletes 200 records one index per call (a loop) and syncs,
deletes 2% of the records at random in one call, compacts,
then deletes the first 2% (a range) in one call, then deletes 3 records
near the start and compacts again (every later record moves by a few
bytes); every step is timed to its return. Each package runs in its own process, alternating, `--rounds`
times (default 3); the table shows each side's best time and the ratio
ref / ours (above 1: ours faster). After each run the survivors are
checked against the model of swap-last deletes, so both sides did the
same work.

Run (each interpreter must import `loaderx`):

    python3 benches/python/maintenance_vs_reference.py \\
        --ours target/pyperf-venv/bin/python --ref "$(bash scripts/ref-venv.sh)"
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, shutil, sys, tempfile, time
import numpy as np
from loaderx.zrecord import DenseStore, RaggedStore

def swap_last(model, idx):
    for i in sorted(set(int(i) for i in idx), reverse=True):
        model[i] = model[-1]
        model.pop()

def run(kind, base):
    rng = np.random.default_rng(1)
    d = tempfile.mkdtemp(dir=base)
    if kind == "dense":
        n = 1_000_000
        data = rng.integers(0, 1 << 30, size=(n, 8), dtype=np.int32)
        store = DenseStore(f"{d}/s", dtype=np.int32, item_shape=(8,), codec="raw")
        store.append(data)
        model = list(range(n))
    else:
        n = 200_000
        lens = rng.integers(1, 65, size=n)
        recs = [rng.integers(0, 1000, size=int(k), dtype=np.int32) for k in lens]
        store = RaggedStore(f"{d}/s", dtype=np.int32, codec="zstd")
        store.append(recs)
        model = list(range(n))
    store.sync()
    out = {}
    singles = rng.integers(0, n - 1000, size=200)
    t = time.perf_counter()
    for i in singles:
        store.delete(int(i))
    out["200 single-index deletes (a loop)"] = time.perf_counter() - t
    t = time.perf_counter(); store.sync(); out["sync after them"] = time.perf_counter() - t
    for i in singles:
        swap_last(model, [i])
    scattered = rng.permutation(len(model))[: n // 50]
    t = time.perf_counter(); store.delete(scattered); out["delete 2% scattered"] = time.perf_counter() - t
    swap_last(model, scattered)
    t = time.perf_counter(); store.compact(); out["compact"] = time.perf_counter() - t
    first = np.arange(n // 50)
    t = time.perf_counter(); store.delete(first); out["delete first 2%"] = time.perf_counter() - t
    swap_last(model, first)
    few = np.array([5, 9, 14])
    store.delete(few)
    swap_last(model, few)
    t = time.perf_counter(); store.compact(); out["compact after deleting 3 near the start"] = time.perf_counter() - t
    # Check a sample of survivors against the model.
    assert len(store) == len(model), (len(store), len(model))
    probe = rng.integers(0, len(model), size=2000)
    got = store[probe]
    for k, i in enumerate(probe):
        want = data[model[i]] if kind == "dense" else recs[model[i]]
        assert np.array_equal(got[k], want), (kind, int(i))
    store.close()
    shutil.rmtree(d)
    return out

print(json.dumps({k: run(k, sys.argv[1]) for k in ("dense", "ragged")}))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ours", required=True, help="python with our loaderx")
    ap.add_argument("--ref", required=True, help="python with loaderx 1.7.2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where the stores live")
    args = ap.parse_args()
    base = args.dir or tempfile.gettempdir()
    os.makedirs(base, exist_ok=True)
    best = {"ours": {}, "ref": {}}
    for r in range(args.rounds):
        for side in ("ref", "ours") if r % 2 == 0 else ("ours", "ref"):
            py = getattr(args, side)
            res = subprocess.run([py, "-c", CHILD, base], check=True,
                                 capture_output=True, text=True)
            got = json.loads(res.stdout.strip().splitlines()[-1])
            for kind, steps in got.items():
                for step, s in steps.items():
                    key = (kind, step)
                    best[side][key] = min(best[side].get(key, float("inf")), s)
    print(f"best of {args.rounds} rounds, seconds to return")
    print(f"| scenario | step | loaderx 1.7.2 | ours | ref / ours |")
    print("|---|---|---:|---:|---:|")
    for key in best["ref"]:
        a, b = best["ref"][key], best["ours"][key]
        print(f"| {key[0]} | {key[1]} | {a:.3f} s | {b:.3f} s | {a / b:.1f}x |")


if __name__ == "__main__":
    sys.exit(main())
