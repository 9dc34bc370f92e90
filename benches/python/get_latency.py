"""One-record reads, ours against loaderx 1.7.2: what a map-style
``Dataset.__getitem__`` pays per sample.

    python get_latency.py --ours PY --ref PY [--rounds 5]

Each side (an interpreter, or a wrapper script, that imports its own
``loaderx``) builds the same stores in a fresh process: 2,000 dense records
of 4 KiB (uint8, a smooth ramp) and 2,000 ragged int32 records of 1..2,000
elements, raw and zstd. A round times 20,000 reads at the same random indices
of each form; the sides alternate rounds (which goes first rotates), and the
table gives each side's median time per call and the median of the
per-round ratios.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

FORMS = ["ds[i]", "ds[[i]]", "ds.__getitems__(8 indices)", "ragged r[i]"]


def side(base):
    import numpy as np
    from loaderx.zrecord import DenseStore, RaggedStore
    out = {}
    idx = np.random.default_rng(0).integers(0, 2000, 20000)
    for codec in ("raw", "zstd"):
        p = os.path.join(base, codec)
        if not os.path.exists(p):
            data = (np.arange(4096 * 2000) % 251).astype(np.uint8).reshape(2000, 4096)
            with DenseStore(p, np.uint8, (4096,), codec) as s:
                s.append(data)
            with RaggedStore(p + "-r", np.int32, codec=codec) as r:
                r.append([np.arange(n, dtype=np.int32) for n in range(1, 2001)])
        s, r = DenseStore(p), RaggedStore(p + "-r")
        assert int(s[5][10]) == (5 * 4096 + 10) % 251 and r[9].tolist() == list(range(10))
        items = [int(i) for i in idx]
        batches = idx.reshape(-1, 8)
        loops = {
            "ds[i]": lambda: [s[i] for i in items],
            "ds[[i]]": lambda: [s[[i]] for i in items],
            "ds.__getitems__(8 indices)": lambda: [s.__getitems__(b) for b in batches],
            "ragged r[i]": lambda: [r[i] for i in items],
        }
        for form in FORMS:
            calls = len(batches) if "8" in form else len(items)
            loops[form]()  # warm
            t = time.perf_counter()
            loops[form]()
            out[f"{codec} {form}"] = (time.perf_counter() - t) / calls * 1e6
        s.close()
        r.close()
    return out


def run(python, base):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    p = subprocess.run([python, os.path.abspath(__file__), "side", base],
                       capture_output=True, text=True, env=env)
    if p.returncode:
        raise SystemExit(f"{python} failed:\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "side":
        print(json.dumps(side(sys.argv[2])))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    dirs = {k: tempfile.mkdtemp(prefix=f"get-{k}-") for k in ("ours", "ref")}
    try:
        got = {"ours": [], "ref": []}
        for r in range(a.rounds):
            for name in (("ours", "ref") if r % 2 == 0 else ("ref", "ours")):
                got[name].append(run(getattr(a, name), dirs[name]))
        print(f"{a.rounds} alternating rounds of 20,000 calls (2,500 for batches of 8); "
              "us per call, medians")
        print("| read | loaderx 1.7.2 | ours | ref / ours (median of rounds) |")
        print("|---|---:|---:|---:|")
        for key in got["ours"][0]:
            o = [g[key] for g in got["ours"]]
            f = [g[key] for g in got["ref"]]
            ratio = statistics.median(x / y for x, y in zip(f, o))
            print(f"| {key} | {statistics.median(f):.2f} | {statistics.median(o):.2f} | {ratio:.2f}x |")
    finally:
        for d in dirs.values():
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
