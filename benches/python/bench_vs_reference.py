"""Python-level benchmark: this package vs loaderx 1.7.2, same run.

Each row runs in a fresh subprocess of each interpreter (ours and the
reference, in separate venvs), on identical data (same seeds) and identical
index plans, and is validated before it is timed. Prints a markdown table with
the ratio ours / reference.

    python benches/python/bench_vs_reference.py \
        --ours target/py-venv/bin/python --ref "$(bash scripts/ref-venv.sh)" \
        [--json rows.json]   # then: plot_gather.py rows.json docs/python-gather.png

Rows: dense gather (256 KiB and 4 KiB records; raw, zstd, zstd_dict; a
loop that uses each batch and drops it, plus for raw a pass that keeps all 20
batches alive, i.e. every output in fresh memory),
zstd_dict write, ragged gather, sampler batch vs numpy default_rng, and the
DataLoader (256 KiB x 256, 4 workers; batches/s and peak RSS).
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

MiB = 1 << 20


def dense_data(np, record_bytes, n):
    """Structured, mildly compressible uint8 records (a smooth base plus noise)."""
    rng = np.random.default_rng(1234)
    base = (np.sin(np.arange(record_bytes) / 37.0) * 60 + 128).astype(np.uint8)
    noise = rng.integers(0, 24, size=(n, record_bytes), dtype=np.uint8)
    return base[None, :] + noise


def ragged_data(np, n):
    rng = np.random.default_rng(99)
    lens = np.clip(rng.lognormal(5.5, 0.8, n).astype(np.int64), 16, 2048)
    return [(rng.integers(0, 32000, size=int(L)) // 7).astype(np.int32) for L in lens]


def best_of(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    times.sort()
    return times[len(times) // 2]


def copy_ceiling(np, data, plan):
    """Seconds per batch to copy the plan's records from memory into one
    warm output, a thread per core (numpy's copy releases the GIL): the
    memory-bandwidth ceiling of a raw gather on this box."""
    import threading
    out = np.empty((256, data.shape[1]), dtype=data.dtype)
    out.fill(0)
    cores = os.cpu_count() or 1

    def part(idx, k):
        for j in range(k, len(idx), cores):
            np.copyto(out[j], data[idx[j]])

    def one_pass():
        for idx in plan:
            ts = [threading.Thread(target=part, args=(idx, k)) for k in range(cores)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
    one_pass()
    return best_of(one_pass, 5) / len(plan)


def worker(task, root, arg):
    import numpy as np
    from loaderx.zrecord import DenseStore, RaggedStore
    from loaderx.utils import train_dict
    out = {}
    if task == "dense":
        codec, record_kib = arg.split(":")
        record_bytes = int(record_kib) << 10
        n = max(512, (128 * MiB) // record_bytes)
        data = dense_data(np, record_bytes, n)
        path = os.path.join(root, f"dense_{codec}_{record_kib}")
        kw = {"codec": codec}
        if codec == "zstd_dict":
            kw["dict_bytes"] = train_dict(data, tier="balanced")
        t = time.perf_counter()
        with DenseStore(path, np.uint8, (record_bytes,), **kw) as ds:
            for k in range(0, n, 4096):
                ds.append(data[k:k + 4096])
        write_s = time.perf_counter() - t
        rng = np.random.default_rng(7)
        plan = [rng.integers(0, n, 256) for _ in range(20)]
        with DenseStore(path) as ds:
            for idx in plan[:3]:
                assert ds[idx].tobytes() == data[idx].tobytes()
            # A training loop: each batch is used, then dropped.
            def consume():
                for idx in plan:
                    x = ds[idx]
                    del x
            consume()
            per = best_of(consume, 5) / len(plan)
            if codec == "raw":
                # Every batch of the pass kept alive (all fresh memory).
                held = best_of(lambda: [ds[idx] for idx in plan], 3) / len(plan)
                out["held_MiBs"] = 256 * record_bytes / held / MiB
                if record_bytes >= 64 << 10:
                    out["copy_MiBs"] = 256 * record_bytes / copy_ceiling(np, data, plan) / MiB
        out["gather_MiBs"] = 256 * record_bytes / per / MiB
        out["write_MiBs"] = n * record_bytes / write_s / MiB
    elif task == "ragged":
        recs = ragged_data(np, 20000)
        path = os.path.join(root, "ragged")
        with RaggedStore(path, np.int32, codec=arg) as rs:
            rs.append(recs)
        rng = np.random.default_rng(8)
        plan = [rng.integers(0, len(recs), 256) for _ in range(50)]
        with RaggedStore(path) as rs:
            for g, k in zip(rs[plan[0]], plan[0]):
                assert g.tobytes() == recs[k].tobytes()
            per = best_of(lambda: [rs[idx] for idx in plan], 3) / len(plan)
        out["krecords_s"] = 256 / per / 1000
    elif task == "sampler":
        from loaderx.zsampler import Sampler
        b = int(arg)
        s = Sampler(1_000_000, b, Sampler.Mode.IID, seed=42)
        g = np.random.default_rng(42)
        n = max(200, 2_000_000 // b)
        ours = best_of(lambda: [s.next() for _ in range(n)], 5) / n
        ref = best_of(lambda: [g.integers(0, 1_000_000, b) for _ in range(n)], 5) / n
        out["us_per_batch"] = ours * 1e6
        out["numpy_us"] = ref * 1e6
        out["vs_numpy"] = ref / ours
    elif task == "loader-write":
        codec = arg
        data = dense_data(np, 256 << 10, 512)
        with DenseStore(os.path.join(root, f"loader_{codec}"), np.uint8, (256 << 10,), codec=codec) as ds:
            ds.append(data)
        with DenseStore(os.path.join(root, f"loader_{codec}_label"), np.int64, ()) as ds:
            ds.append(np.arange(512))
    elif task == "loader":
        from loaderx.dataloader import DataLoader
        codec = arg
        streams = {"data": DenseStore(os.path.join(root, f"loader_{codec}")),
                   "label": DenseStore(os.path.join(root, f"loader_{codec}_label"))}
        loader = DataLoader(streams, num_workers=4, batch_size=256)
        for _ in range(5):
            next(loader)
        n = 40
        t = time.perf_counter()
        for _ in range(n):
            b = next(loader)
            assert b["data"].shape == (256, 256 << 10)
        out["batches_s"] = n / (time.perf_counter() - t)
        loader.close()
        out["peak_rss_MiB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(out))


def run(python, task, root, arg):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    proc = subprocess.run([python, os.path.abspath(__file__), "worker", task, root, arg],
                          capture_output=True, text=True, env=env)
    if proc.returncode:
        raise SystemExit(f"{python} {task} {arg} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        return worker(*sys.argv[2:5])
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    ap.add_argument("--json", default=None, help="also write the rows as JSON here (for plot_gather.py)")
    args = ap.parse_args()
    table = []
    base = tempfile.mkdtemp(prefix="lx-bench-", dir=args.dir)
    rows = []

    def pair(task, arg, key, label, higher=True):
        res = {}
        for name, py in (("ref", args.ref), ("ours", args.ours)):
            root = os.path.join(base, name)
            os.makedirs(root, exist_ok=True)
            res[name] = run(py, task, root, arg)
            shutil.rmtree(root, ignore_errors=True)
        return res

    def emit(label, unit, ref, ours, higher=True):
        ratio = ours / ref if higher else ref / ours
        rows.append(f"| {label} | {ref:.1f} {unit} | {ours:.1f} {unit} | {ratio:.2f}x |")
        table.append({"row": label, "unit": unit, "ref": ref, "ours": ours, "ratio": ratio})
        print(rows[-1], flush=True)

    print("| row | loaderx 1.7.2 | ours | ours vs ref |\n|---|---|---|---|", flush=True)
    for kib in (256, 4):
        for codec in ("raw", "zstd", "zstd_dict"):
            r = pair("dense", f"{codec}:{kib}", None, None)
            emit(f"dense gather {kib} KiB {codec}", "MiB/s",
                 r["ref"]["gather_MiBs"], r["ours"]["gather_MiBs"])
            if codec == "raw":
                emit(f"dense gather {kib} KiB raw, all 20 batches held", "MiB/s",
                     r["ref"]["held_MiBs"], r["ours"]["held_MiBs"])
                if "copy_MiBs" in r["ours"]:
                    c = r["ours"]["copy_MiBs"]
                    rows.append(f"| memcpy ceiling {kib} KiB (same records from RAM into a "
                                f"warm output, a thread per core) | | {c:.1f} MiB/s | "
                                f"ref at {r['ref']['gather_MiBs'] / c:.2f}, "
                                f"ours at {r['ours']['gather_MiBs'] / c:.2f} of it |")
                    print(rows[-1], flush=True)
            if codec == "zstd_dict":
                emit(f"zstd_dict write {kib} KiB", "MiB/s",
                     r["ref"]["write_MiBs"], r["ours"]["write_MiBs"])
    for codec in ("raw", "zstd"):
        r = pair("ragged", codec, None, None)
        emit(f"ragged gather {codec} (256 records)", "krec/s",
             r["ref"]["krecords_s"], r["ours"]["krecords_s"])
    for b in ("256", "1024", "8192"):
        r = pair("sampler", b, None, None)
        rows.append(f"| sampler IID batch {b} (per batch; vs numpy in the same process) | "
                    f"{r['ref']['us_per_batch']:.2f} us ({r['ref']['vs_numpy']:.2f}x numpy) | "
                    f"{r['ours']['us_per_batch']:.2f} us ({r['ours']['vs_numpy']:.2f}x numpy) | "
                    f"{r['ref']['us_per_batch'] / r['ours']['us_per_batch']:.2f}x |")
        print(rows[-1], flush=True)
    for codec in ("raw", "zstd"):
        res = {}
        for name, py in (("ref", args.ref), ("ours", args.ours)):
            root = os.path.join(base, name)
            os.makedirs(root, exist_ok=True)
            run(py, "loader-write", root, codec)
            res[name] = run(py, "loader", root, codec)
            shutil.rmtree(root, ignore_errors=True)
        emit(f"DataLoader 256 KiB x 256, 4 workers, {codec}", "batches/s",
             res["ref"]["batches_s"], res["ours"]["batches_s"])
        emit(f"DataLoader peak RSS, {codec}", "MiB",
             res["ref"]["peak_rss_MiB"], res["ours"]["peak_rss_MiB"], higher=False)
    shutil.rmtree(base, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(table, f, indent=1)


if __name__ == "__main__":
    main()
