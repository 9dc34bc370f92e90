"""What `DataLoader(allocate=...)` saves on the CPU: batches gathered straight
into recycled memory the caller owns, against copying each batch there in
the transform, for ours and loaderx 1.7.2 in the same run.

The GPU pattern it stands for: pinning in the transform
(`torch.from_numpy(x).pin_memory()`) is one more copy of every batch, into
memory PyTorch's caching host allocator recycles; `allocate` returning
pinned tensors makes the gather write there directly. Here, with no torch
and no GPU, "pinned" memory is a plain NumPy buffer recycled by a small
cache once the loop is done with a batch, so the rows measure the copy and
nothing else:

- `plain`: the default loader (identity transform; ours gathers into its
  own recycled buffers);
- `copy`: the transform copies every array into a recycled buffer (what
  pinning in the transform costs; the only way with loaderx 1.7.2);
- `allocate`: ours gathers into recycled buffers handed out by `allocate`.

Data: 512 records of 256 KiB (raw codec) + an int64 label, batch 256, 4
workers; the loop touches one byte per page of each batch. Every (side,
variant) runs in its own process, rounds alternate, and the table gives
each one's median batches/s and the ratios within each round.

    python3 benches/python/allocate_loop.py --ours target/pyperf-venv/bin/python \\
        --ref "$(bash scripts/ref-venv.sh)" [--rounds 5] [--batches 40]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

N, RECORD = 512, 256 << 10


def build(root):
    import numpy as np
    from loaderx.zrecord import DenseStore
    rng = np.random.default_rng(0)
    with DenseStore(os.path.join(root, "x"), np.uint8, (RECORD,), "raw") as s:
        for _ in range(0, N, 64):
            s.append(rng.integers(0, 255, (64, RECORD), dtype=np.uint8))
    with DenseStore(os.path.join(root, "y"), np.int64, (), "raw") as s:
        s.append(np.arange(N))


class Cache:
    """Buffers by (shape, dtype), given back once the loop is done with a
    batch: the stand-in for PyTorch's caching host allocator."""

    def __init__(self):
        self.free, self.lock = {}, threading.Lock()

    def get(self, shape, dtype):
        import numpy as np
        with self.lock:
            got = self.free.get((shape, dtype))
            if got:
                return got.pop()
        return np.empty(shape, dtype)

    def put(self, a):
        with self.lock:
            self.free.setdefault((a.shape, a.dtype), []).append(a)


def side(root, variant, batches):
    import numpy as np
    from loaderx.dataloader import DataLoader
    from loaderx.zrecord import DenseStore
    cache = Cache()
    kw = {}
    if variant == "copy":
        def copy(batch):
            out = {}
            for name, a in batch.items():
                out[name] = cache.get(a.shape, a.dtype)
                np.copyto(out[name], a)
            return out
        kw["transform"] = copy
    elif variant == "allocate":
        kw["allocate"] = lambda name, shape, dtype: cache.get(shape, dtype)
    streams = {k: DenseStore(os.path.join(root, k)) for k in ("x", "y")}
    try:
        with DataLoader(streams, batch_size=256, num_workers=4, prefetch_size=4,
                        **kw) as loader:
            def one():
                b = next(loader)
                int(b["x"][:, ::4096].sum())  # the loop reads the batch
                if variant != "plain":
                    for a in b.values():
                        cache.put(a)
            for _ in range(16):  # warm: page cache, buffers (as many as the pipeline holds)
                one()
            t = time.perf_counter()
            for _ in range(batches):
                one()
            return {"batches_per_s": batches / (time.perf_counter() - t)}
    finally:
        for s in streams.values():
            s.close()


def run(python, *args):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    p = subprocess.run([python, os.path.abspath(__file__), *args],
                       capture_output=True, text=True, env=env)
    if p.returncode:
        raise SystemExit(f"{python} {' '.join(args)} failed:\n{p.stderr}")
    out = p.stdout.strip()
    return json.loads(out.splitlines()[-1]) if out else None


def main():
    if len(sys.argv) > 1 and sys.argv[1] in ("build", "side"):
        if sys.argv[1] == "build":
            build(sys.argv[2])
        else:
            print(json.dumps(side(sys.argv[2], sys.argv[3], int(sys.argv[4]))))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batches", type=int, default=40)
    a = ap.parse_args()
    cells = [("ours", "plain"), ("ours", "copy"), ("ours", "allocate"),
             ("ref", "plain"), ("ref", "copy")]
    root = tempfile.mkdtemp(prefix="allocate-loop-")
    try:
        run(a.ours, "build", root)
        got = {c: [] for c in cells}
        for r in range(a.rounds):
            order = cells[r % len(cells):] + cells[:r % len(cells)]
            for who, variant in order:
                py = a.ours if who == "ours" else a.ref
                got[(who, variant)].append(
                    run(py, "side", root, variant, str(a.batches))["batches_per_s"])
    finally:
        shutil.rmtree(root)

    def ratio(num, den):
        return statistics.median(x / y for x, y in zip(got[num], got[den]))

    print(f"{N} x 256 KiB raw + int64 label, batch 256, 4 workers, {a.batches} timed "
          f"batches, {a.rounds} alternating rounds, each in its own process")
    print("| side, variant | batches/s (median) | rounds |")
    print("|---|---:|---|")
    for c in cells:
        print(f"| {c[0]}, {c[1]} | {statistics.median(got[c]):.1f} | "
              f"{', '.join(f'{x:.1f}' for x in got[c])} |")
    print(f"ours allocate / ours copy: {ratio(('ours', 'allocate'), ('ours', 'copy')):.2f}x; "
          f"ours allocate / ref copy: {ratio(('ours', 'allocate'), ('ref', 'copy')):.2f}x; "
          f"ours allocate / ours plain: {ratio(('ours', 'allocate'), ('ours', 'plain')):.2f}x "
          "(medians of per-round ratios)")


if __name__ == "__main__":
    main()
