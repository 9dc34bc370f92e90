"""Sampler.next() per call, two builds of the package A/B, each against
NumPy's ``default_rng(42).integers(0, 1_000_000, B)`` in the same process.

    python sampler_ab.py --a PY_A --b PY_B [--runs 6] [--blocks 200] [--calls 20]

PY_A and PY_B are interpreters (or wrapper scripts that set PYTHONPATH) that
import their own ``loaderx``. Each run is a fresh process per side, the
sides alternating (which goes first rotates); in a process, for each batch
size B in 256, 1024, 8192 (``Sampler(1_000_000, B, Sampler.Mode.IID)``), both
are warmed, then `blocks` timed blocks of `calls` calls alternate between
the sampler and NumPy, so a burst of load hits both. Per run: the best and
the median block's time per call, and NumPy's median / ours median. The
table gives, per side, the median over runs of those medians, the best over
runs, and the range of the per-run ratio.
"""
import argparse
import json
import statistics
import subprocess
import sys
import time

BATCHES = (256, 1024, 8192)


def side(blocks, calls):
    import numpy as np
    from loaderx.zsampler import Sampler

    out = {}
    for b in BATCHES:
        s = Sampler(1_000_000, b, Sampler.Mode.IID)
        g = np.random.default_rng(42)
        for _ in range(200):
            s.next()
            g.integers(0, 1_000_000, b)
        ours, ref = [], []
        clock = time.perf_counter_ns
        for _ in range(blocks):
            t = clock()
            for _ in range(calls):
                s.next()
            ours.append((clock() - t) / calls / 1e3)
            t = clock()
            for _ in range(calls):
                g.integers(0, 1_000_000, b)
            ref.append((clock() - t) / calls / 1e3)
        out[b] = {
            "best": min(ours), "median": statistics.median(ours),
            "np_best": min(ref), "np_median": statistics.median(ref),
        }
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a")
    ap.add_argument("--b")
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--blocks", type=int, default=200)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--side", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side:
        print(json.dumps(side(args.blocks, args.calls)))
        return
    res = {"a": [], "b": []}
    for r in range(args.runs):
        order = ("a", "b") if r % 2 == 0 else ("b", "a")
        for k in order:
            p = subprocess.run([getattr(args, k), __file__, "--side", "--blocks",
                                str(args.blocks), "--calls", str(args.calls)],
                               capture_output=True, text=True, check=True)
            res[k].append({int(b): v for b, v in json.loads(p.stdout).items()})
            row = " ".join(f"{b}: {v['median']:.2f}/{v['np_median']:.2f}"
                           for b, v in res[k][-1].items())
            print(f"run {r} {k}: us median ours/numpy {row}", file=sys.stderr, flush=True)
    print("| batch | side | median us/call | best us/call | numpy median us | "
          "numpy/ours (median of runs) | per-run range |")
    print("|---:|---|---:|---:|---:|---:|---|")
    for b in BATCHES:
        for k in ("a", "b"):
            v = [x[b] for x in res[k]]
            ratios = [x["np_median"] / x["median"] for x in v]
            print(f"| {b} | {k} | {statistics.median(x['median'] for x in v):.2f} | "
                  f"{min(x['best'] for x in v):.2f} | "
                  f"{statistics.median(x['np_median'] for x in v):.2f} | "
                  f"{statistics.median(ratios):.2f}x | {min(ratios):.2f}-{max(ratios):.2f}x |")
    print("a / b, median of per-run median ratios: " + ", ".join(
        f"{b}: {statistics.median(x[b]['median'] / y[b]['median'] for x, y in zip(res['a'], res['b'])):.3f}"
        for b in BATCHES))


if __name__ == "__main__":
    main()
