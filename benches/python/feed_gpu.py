"""Feeding a GPU through the DataLoader: ours against loaderx 1.7.2.

A training-shaped loop on a machine with CUDA and PyTorch: image-like uint8
records of 224 x 224 x 3 with an int64 label, batch 256, 4 workers, the
transform turns each batch into torch tensors on the worker threads, and the
loop copies them to the GPU and runs a small reduction on them (a stand-in
for the model's first layer), synchronizing every step. Both packages read
the same store files (written once by ours; the bytes are the reference's
format). The sides alternate, each round in a fresh process, and the figure
is images per second; the ceiling is the same loop over one batch already in
host memory (the copy to the GPU and the reduction alone).

Variants: `plain` (pageable tensors), `pinned` (the transform pins each
batch: one more copy, on the workers), `allocate` (ours gathers straight into
pinned tensors through `DataLoader(allocate=...)`; the reference, which has
no such hook, runs its `pinned` loop in that row).

    python feed_gpu.py --ours PY --ref PY [--records 2048] [--rounds 3]
        [--variants plain,pinned,allocate]

PY: an interpreter (or a wrapper script) that imports that side's `loaderx`
and torch. Run without a GPU it uses the CPU and says so.
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

SHAPE = (224, 224, 3)


def make_data(n, seed):
    import numpy as np
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:SHAPE[0], 0:SHAPE[1]]
    out = np.empty((n,) + SHAPE, np.uint8)
    for i in range(n):
        a, b, c = rng.uniform(0.01, 0.05, 3)
        base = 128 + 100 * np.sin(a * x + b * y + c * i)
        noise = rng.integers(0, 24, SHAPE, dtype=np.uint8)
        out[i] = (base[..., None] + noise).clip(0, 255).astype(np.uint8)
    return out, rng.integers(0, 1000, n).astype(np.int64)


def build(path, codec, n):
    import numpy as np
    from loaderx.zrecord import DenseStore
    images, labels = make_data(n, 7)
    with DenseStore(os.path.join(path, "image"), np.dtype("u1"), SHAPE, codec) as s:
        s.append(images)
    with DenseStore(os.path.join(path, "label"), np.dtype("i8"), (), "raw") as s:
        s.append(labels)


def side(path, batches, ceiling, variant="plain"):
    import numpy as np
    import inspect
    import torch
    from loaderx.zrecord import DenseStore
    from loaderx.dataloader import DataLoader
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    allocating = (variant == "allocate"
                  and "allocate" in inspect.signature(DataLoader).parameters)
    pinned = variant in ("pinned", "allocate") and not allocating

    def step(x, y):
        x = x.to(dev, non_blocking=True)
        y = y.to(dev, non_blocking=True)
        s = x.float().mean(dim=(1, 2, 3)) + y.float()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        return s

    if ceiling:
        x = torch.from_numpy(np.full((256,) + SHAPE, 3, np.uint8))
        y = torch.arange(256)
        if variant != "plain" and dev.type == "cuda":
            x, y = x.pin_memory(), y.pin_memory()
        for _ in range(3):
            step(x, y)
        t = time.perf_counter()
        for _ in range(batches):
            step(x, y)
        return {"images_per_s": 256 * batches / (time.perf_counter() - t), "device": str(dev)}

    def to_torch(batch):
        if allocating:  # already pinned torch tensors, filled by the gather
            return batch["image"], batch["label"]
        x, y = torch.from_numpy(batch["image"]), torch.from_numpy(batch["label"])
        if pinned:  # page-locked copies, made on the worker threads
            x, y = x.pin_memory(), y.pin_memory()
        return x, y

    torch_dtype = {np.dtype("u1"): torch.uint8, np.dtype("i8"): torch.int64}

    def allocate(name, shape, dtype):  # page-locked, recycled by torch's host cache
        return torch.empty(shape, dtype=torch_dtype[dtype], pin_memory=dev.type == "cuda")

    extra = {"allocate": allocate} if allocating else {}
    loader = DataLoader({"image": DenseStore(os.path.join(path, "image")),
                         "label": DenseStore(os.path.join(path, "label"))},
                        num_workers=4, batch_size=256, prefetch_size=4, mode=2, seed=42,
                        transform=to_torch, **extra)
    try:
        for _ in range(8):  # warm: page cache, pools, the prefetched batches
            step(*next(loader))
        t = time.perf_counter()
        for _ in range(batches):
            step(*next(loader))
        return {"images_per_s": 256 * batches / (time.perf_counter() - t), "device": str(dev)}
    finally:
        loader.close()


def run(python, *args):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    p = subprocess.run([python, os.path.abspath(__file__), *args],
                       capture_output=True, text=True, env=env)
    if p.returncode:
        raise SystemExit(f"{python} {' '.join(args)} failed:\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1]) if p.stdout.strip() else None


def main():
    if len(sys.argv) > 1 and sys.argv[1] in ("build", "side"):
        if sys.argv[1] == "build":
            build(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        else:
            print(json.dumps(side(sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1",
                                  sys.argv[5] if len(sys.argv) > 5 else "plain")))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--records", type=int, default=2048)
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--codecs", default="raw,zstd")
    ap.add_argument("--variants", default="plain",
                    help="plain: pageable tensors; pinned: the transform also pins them; "
                         "allocate: ours gathers into pinned tensors (ref: pinned)")
    a = ap.parse_args()
    base = tempfile.mkdtemp(prefix="feed-gpu-")
    try:
        rows = []
        ceiling = {}
        for variant in a.variants.split(","):
            ceil = [run(a.ours, "side", base, str(a.batches), "1", variant) for _ in range(2)]
            dev = ceil[0]["device"]
            ceiling[variant] = max(c["images_per_s"] for c in ceil)
        for codec in a.codecs.split(","):
            path = os.path.join(base, codec)
            os.makedirs(path)
            run(a.ours, "build", path, codec, str(a.records))
            for variant in a.variants.split(","):
                got = {"ours": [], "ref": []}
                for r in range(a.rounds):
                    order = ("ours", "ref") if r % 2 == 0 else ("ref", "ours")
                    for name in order:
                        py = a.ours if name == "ours" else a.ref
                        got[name].append(run(py, "side", path, str(a.batches), "0",
                                             variant)["images_per_s"])
                ratios = [o / f for o, f in zip(got["ours"], got["ref"])]
                rows.append((f"{codec}, {variant}", statistics.median(got["ref"]),
                             statistics.median(got["ours"]), statistics.median(ratios),
                             ceiling[variant]))
            shutil.rmtree(path)
        print(f"device {dev}; {a.records} records of 224x224x3 uint8 + int64 label, batch 256, "
              f"4 workers, {a.batches} timed batches per round, {a.rounds} alternating rounds")
        for variant, c in ceiling.items():
            print(f"ceiling, {variant} (one host batch copied to the device + the reduction): "
                  f"{c:,.0f} images/s")
        print("| codec, tensors | loaderx 1.7.2 images/s | ours images/s | ours vs ref (median of rounds) | ours / ceiling |")
        print("|---|---:|---:|---:|---:|")
        for name, ref, ours, ratio, c in rows:
            print(f"| {name} | {ref:,.0f} | {ours:,.0f} | {ratio:.2f}x | {ours / c:.2f} |")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
