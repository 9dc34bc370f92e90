"""Peer timings for benches/src/bin/importers.rs.

Usage: python importers_peers.py THREADS REPEATS ws.txt csv.txt f32.npy
       [--text-only] [--no-numpy-text] [--fast-loadtxt-only]
       (--fast-loadtxt-only still runs numpy.load unless --text-only)
Prints one line per measurement: `<peer> <file-tag> <best seconds> <checksum>`.
A peer that is not installed prints `<peer> <file-tag> missing -`.
"""
import os
import sys
import time

threads, repeats, ws, csv, npy = int(sys.argv[1]), int(sys.argv[2]), *sys.argv[3:6]
os.environ.setdefault("OMP_NUM_THREADS", str(threads))
import numpy as np  # noqa: E402


def best(fn):
    t = float("inf")
    out = None
    for _ in range(repeats):
        s = time.perf_counter()
        out = fn()
        t = min(t, time.perf_counter() - s)
    return t, out


def report(peer, tag, fn):
    try:
        t, a = best(fn)
        print(peer, tag, f"{t:.6f}", f"{float(np.nansum(a, dtype=np.float64)):.6e}", flush=True)
    except ImportError:
        print(peer, tag, "missing", "-", flush=True)


def fast(path, delim):
    import fast_loadtxt as fl
    return fl.loadtxt(path, num_threads=threads)


def pandas(path, sep):
    import pandas as pd
    kw = dict(sep=sep, header=None, engine="c", dtype=np.float64)
    if sep is None:
        kw.update(sep=r"\s+")
    return pd.read_csv(path, **kw).to_numpy()


only_fast = "--fast-loadtxt-only" in sys.argv
if "--no-numpy-text" not in sys.argv and not only_fast:
    report("numpy.loadtxt", "ws", lambda: np.loadtxt(ws))
    report("numpy.loadtxt", "csv", lambda: np.loadtxt(csv, delimiter=","))
report("fast_loadtxt", "ws", lambda: fast(ws, None))
report("fast_loadtxt", "csv", lambda: fast(csv, ","))
if not only_fast:
    report("pandas.read_csv", "ws", lambda: pandas(ws, None))
    report("pandas.read_csv", "csv", lambda: pandas(csv, ","))
if "--text-only" not in sys.argv:
    # Every round (like fast_loadtxt): the bench pairs it with its own read.
    report("numpy.load", "npy", lambda: np.load(npy))
