"""Python-level benchmark: this package vs loaderx 1.7.2, interleaved in one run.

Every row keeps one long-lived worker process per side (ours and the
reference, each in its own venv; for compressed gathers a third one that
decodes the same frames with python-zstandard on every core) and alternates
short timed rounds between them: ref, ours, ceiling, ref, ours, ... The table
reports the median of each side and the median of the per-round ratios, so a
burst of load on the box hits both sides of a round alike.

Stores are written once by the reference (the on-disk format is shared) and
copied, so both packages and the ceiling read byte-identical frames; the index
plans come from the same seeds and every side validates its first batches
against the source data before timing.

    python benches/python/bench_vs_reference.py \\
        --ours target/pyperf-venv/bin/python --ref "$(bash scripts/ref-venv.sh)" \\
        --ceiling target/bench-venv/bin/python \\
        [--rows gather-256-zstd,write-*] [--rounds 7] [--json rows.json]
    # then: plot_gather.py rows.json docs/python-gather.png

`--list` prints the row names; `--rows` takes comma-separated names or
shell patterns. The ceiling interpreter needs numpy and zstandard
(python-zstandard, a bench-only tool: `pip install zstandard` into the bench
venv, never a package dependency); without `--ceiling` the ceiling columns
are left out.

Rows: dense gather (256 KiB and 4 KiB records; raw, zstd, zstd_dict; a loop
that uses each batch and drops it; for raw also a pass that keeps all 20
batches alive, and at 256 KiB a memcpy ceiling), zstd_dict write (same
dictionary, level 19 both sides, with each side's CPU use), ragged gather,
sampler batch vs numpy default_rng (in each process), and the DataLoader
(256 KiB x 256, 4 workers; batches/s and peak RSS).
"""

import argparse
import fnmatch
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

MiB = 1 << 20
VERBOSE = False
BATCH = 256
PLAN_BATCHES = 20


# ---------------------------------------------------------------------------
# data and plans (identical in every process: same seeds)

def dense_data(np, record_bytes, n):
    """Structured, mildly compressible uint8 records (a smooth base plus noise)."""
    rng = np.random.default_rng(1234)
    base = (np.sin(np.arange(record_bytes) / 37.0) * 60 + 128).astype(np.uint8)
    noise = rng.integers(0, 24, size=(n, record_bytes), dtype=np.uint8)
    return base[None, :] + noise


def dense_n(record_bytes):
    return max(512, (128 * MiB) // record_bytes)


def dense_plan(np, n):
    rng = np.random.default_rng(7)
    return [rng.integers(0, n, BATCH) for _ in range(PLAN_BATCHES)]


def ragged_data(np, n):
    rng = np.random.default_rng(99)
    lens = np.clip(rng.lognormal(5.5, 0.8, n).astype(np.int64), 16, 2048)
    return [(rng.integers(0, 32000, size=int(L)) // 7).astype(np.int32) for L in lens]


def ragged_plan(np, n):
    rng = np.random.default_rng(8)
    return [rng.integers(0, n, BATCH) for _ in range(50)]


def cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# ---------------------------------------------------------------------------
# one-shot builders (run by the reference interpreter)

def build(task, arg, path):
    import numpy as np
    from loaderx.zrecord import DenseStore, RaggedStore
    from loaderx.utils import train_dict
    if task == "dense":
        codec, kib = arg.split(":")
        rb = int(kib) << 10
        n = dense_n(rb)
        data = dense_data(np, rb, n)
        kw = {"codec": codec}
        if codec == "zstd_dict":
            kw["dict_bytes"] = train_dict(data, tier="balanced")
        with DenseStore(path, np.uint8, (rb,), **kw) as ds:
            for k in range(0, n, 4096):
                ds.append(data[k:k + 4096])
    elif task == "ragged":
        with RaggedStore(path, np.int32, codec=arg) as rs:
            rs.append(ragged_data(np, 20000))
    elif task == "loader":
        data = dense_data(np, 256 << 10, 512)
        with DenseStore(os.path.join(path, "data"), np.uint8, (256 << 10,), codec=arg) as ds:
            ds.append(data)
        with DenseStore(os.path.join(path, "label"), np.int64, ()) as ds:
            ds.append(np.arange(512))
    elif task == "dict":
        codec, kib = arg.split(":")
        rb = int(kib) << 10
        with open(path, "wb") as f:
            f.write(train_dict(dense_data(np, rb, dense_n(rb)), tier="balanced"))
    return {}


# ---------------------------------------------------------------------------
# long-lived workers: setup, then one JSON line per command read from stdin

class DenseWorker:
    def __init__(self, np, arg, path):
        from loaderx.zrecord import DenseStore
        codec, kib = arg.split(":")
        self.np, self.rb = np, int(kib) << 10
        n = dense_n(self.rb)
        self.data = dense_data(np, self.rb, n)
        self.plan = dense_plan(np, n)
        self.ds = DenseStore(path)
        for idx in self.plan[:3]:
            assert self.ds[idx].tobytes() == self.data[idx].tobytes()
        self.gather()  # warm: page cache, pools, threads

    def gather(self):
        """One pass of the training loop (each batch used, then dropped)."""
        ds = self.ds
        t = time.perf_counter()
        for idx in self.plan:
            x = ds[idx]
            del x
        return {"s": (time.perf_counter() - t) / len(self.plan)}

    def held(self):
        """One pass keeping every batch alive (every output in fresh memory)."""
        t = time.perf_counter()
        kept = [self.ds[idx] for idx in self.plan]
        s = (time.perf_counter() - t) / len(self.plan)
        del kept
        return {"s": s}

    def copy(self):
        """The memcpy ceiling: the plan's records copied from memory into one
        warm output, a thread per core (numpy's copy releases the GIL)."""
        import threading
        np, data = self.np, self.data
        if not hasattr(self, "out"):
            self.out = np.zeros((BATCH, self.rb), dtype=np.uint8)
        out, cores = self.out, os.cpu_count() or 1

        def part(idx, k):
            for j in range(k, len(idx), cores):
                np.copyto(out[j], data[idx[j]])
        t = time.perf_counter()
        for idx in self.plan:
            ts = [threading.Thread(target=part, args=(idx, k)) for k in range(cores)]
            for th in ts:
                th.start()
            for th in ts:
                th.join()
        return {"s": (time.perf_counter() - t) / len(self.plan)}


class CeilingWorker:
    """Decodes the plan's frames, read straight out of the store files, with
    python-zstandard (libzstd 1.5.7, as ours; the store's dictionary for
    zstd_dict) on every core, two ways, and keeps the faster per round:

    - `multi_decompress_to_buffer(threads=-1)`: one call per batch, frames
      split over a C thread per core; the output is malloc'd per call (at
      256 KiB that is 32 MiB per thread: fresh pages every call);
    - warm: a Python thread per core, each frame `stream_reader(...).readinto`
      its row of one reused output array (GIL released in the decode; a few
      us of Python per frame, which matters at 4 KiB)."""

    def __init__(self, np, arg, path):
        import threading
        import zstandard
        codec, kib = arg.split(":")
        self.rb = rb = int(kib) << 10
        n = dense_n(rb)
        data = dense_data(np, rb, n)
        plan = dense_plan(np, n)
        loc = np.fromfile(os.path.join(path, "0.loc"),
                          dtype=[("off", "<u4"), ("phys", "<u4"), ("logic", "<u4"), ("chunk", "<u4")])
        assert len(loc) >= n and (loc["logic"][:n] == rb).all()
        chunks = {c: np.fromfile(os.path.join(path, f"{c}.chunk"), dtype=np.uint8)
                  for c in np.unique(loc["chunk"][:n])}
        self.cores = os.cpu_count() or 1
        if codec == "zstd_dict":
            with open(os.path.join(path, "dict.zr"), "rb") as f:
                dict_bytes = f.read()
            self.dctxs = [zstandard.ZstdDecompressor(dict_data=zstandard.ZstdCompressionDict(dict_bytes))
                          for _ in range(self.cores)]
        else:
            self.dctxs = [zstandard.ZstdDecompressor() for _ in range(self.cores)]
        self.batches, self.frames = [], []
        phys = 0
        for idx in plan:
            e = loc[idx]
            frames = [chunks[int(c)][o:o + p] for o, p, c in zip(e["off"], e["phys"], e["chunk"])]
            phys += int(e["phys"].sum())
            segs = np.zeros((len(frames), 2), dtype=np.uint64)
            segs[:, 1] = [len(f) for f in frames]
            segs[1:, 0] = np.cumsum(segs[:-1, 1])
            buf = zstandard.BufferWithSegments(b"".join(f.tobytes() for f in frames), segs.tobytes())
            sizes = np.full(len(frames), rb, dtype=np.uint64).tobytes()
            self.batches.append((buf, sizes))
            self.frames.append(frames)
        self.ratio = (len(plan) * BATCH * rb) / phys
        self.out = np.zeros((BATCH, rb), dtype=np.uint8)
        self.rows = [memoryview(self.out[j]) for j in range(BATCH)]
        self.threading = threading
        for (buf, sizes), idx in list(zip(self.batches, plan))[:2]:
            got = self.dctxs[0].multi_decompress_to_buffer(buf, decompressed_sizes=sizes, threads=-1)
            for k in range(len(idx)):
                assert got[k].tobytes() == data[idx[k]].tobytes()
        self._warm_batch(self.frames[0])
        assert self.out.tobytes() == data[plan[0]].tobytes()
        self.gather()

    def _warm_part(self, frames, k):
        d, rows, step = self.dctxs[k], self.rows, self.cores
        for j in range(k, len(frames), step):
            with d.stream_reader(frames[j]) as r:
                r.readinto(rows[j])

    def _warm_batch(self, frames):
        ts = [self.threading.Thread(target=self._warm_part, args=(frames, k))
              for k in range(self.cores)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    def gather(self):
        dctx = self.dctxs[0]
        t = time.perf_counter()
        for buf, sizes in self.batches:
            out = dctx.multi_decompress_to_buffer(buf, decompressed_sizes=sizes, threads=-1)
            del out
        multi = (time.perf_counter() - t) / len(self.batches)
        t = time.perf_counter()
        for frames in self.frames:
            self._warm_batch(frames)
        warm = (time.perf_counter() - t) / len(self.frames)
        return {"s": min(multi, warm), "multi_s": multi, "warm_s": warm, "ratio": self.ratio}


class WriteWorker:
    """Appends a slice of the dense data to a fresh zstd_dict store with a
    dictionary both sides share (level 19 both sides); reports wall and CPU
    seconds."""

    def __init__(self, np, arg, path):
        codec, kib = arg.split(":")
        self.np, self.rb = np, int(kib) << 10
        self.data = dense_data(np, self.rb, (16 * MiB) // self.rb)
        with open(os.path.join(path, "dict.bin"), "rb") as f:
            self.dict = f.read()
        self.root = os.path.join(path, f"w{os.getpid()}")
        os.makedirs(self.root)
        self.k = 0

    def write(self):
        from loaderx.zrecord import DenseStore
        np = self.np
        path = os.path.join(self.root, str(self.k))
        self.k += 1
        t, c = time.perf_counter(), cpu_s()
        with DenseStore(path, np.uint8, (self.rb,), codec="zstd_dict", dict_bytes=self.dict) as ds:
            for k in range(0, len(self.data), 4096):
                ds.append(self.data[k:k + 4096])
        wall, cpu = time.perf_counter() - t, cpu_s() - c
        with DenseStore(path) as ds:
            assert ds[[0, len(self.data) - 1]].tobytes() == self.data[[0, -1]].tobytes()
        shutil.rmtree(path)
        return {"s": wall, "cpu_s": cpu, "cpu": cpu / wall, "MiBs": self.data.nbytes / wall / MiB}


class RaggedWorker:
    def __init__(self, np, arg, path):
        from loaderx.zrecord import RaggedStore
        recs = ragged_data(np, 20000)
        self.plan = ragged_plan(np, len(recs))
        self.rs = RaggedStore(path)
        for g, k in zip(self.rs[self.plan[0]], self.plan[0]):
            assert g.tobytes() == recs[k].tobytes() and g.shape == recs[k].shape
        self.gather()

    def gather(self):
        rs = self.rs
        t = time.perf_counter()
        for idx in self.plan:
            x = rs[idx]
            del x
        return {"s": (time.perf_counter() - t) / len(self.plan)}

    def packed(self):
        """The same batches as one packed array + offsets (ours only:
        ``RaggedStore.gather_packed``, an extension)."""
        rs = self.rs
        if not hasattr(self, "checked"):
            values, offsets, _ = rs.gather_packed(self.plan[0])
            assert values.tobytes() == b"".join(g.tobytes() for g in rs[self.plan[0]])
            self.checked = True
        t = time.perf_counter()
        for idx in self.plan:
            x = rs.gather_packed(idx)
            del x
        return {"s": (time.perf_counter() - t) / len(self.plan)}


class SamplerWorker:
    def __init__(self, np, arg, path):
        from loaderx.zsampler import Sampler
        self.b = int(arg)
        self.s = Sampler(1_000_000, self.b, Sampler.Mode.IID, seed=42)
        self.g = np.random.default_rng(42)
        self.n = max(200, 1_000_000 // self.b)
        self.sample()

    def sample(self):
        s, g, b, n = self.s, self.g, self.b, self.n
        # Warm both first (the worker was idle, waiting for its turn: cold
        # caches, and on a VM possibly a halted vCPU), then alternate four
        # slices of each, so neither side always runs first.
        for _ in range(20):
            s.next()
            g.integers(0, 1_000_000, b)
        ours = ref = 0.0
        for _ in range(4):
            t = time.perf_counter()
            for _ in range(n):
                s.next()
            ours += time.perf_counter() - t
            t = time.perf_counter()
            for _ in range(n):
                g.integers(0, 1_000_000, b)
            ref += time.perf_counter() - t
        return {"s": ours / (4 * n), "numpy_s": ref / (4 * n)}


def settle(quiet_ms=3.0, every_s=0.05, limit_s=10.0):
    """Waits until this process's background threads go idle (under
    `quiet_ms` of CPU per `every_s`): a loader refills its prefetch pipeline
    after a round, and that refill must not run during the other side's
    timed round."""
    end = time.perf_counter() + limit_s
    last = cpu_s()
    while time.perf_counter() < end:
        time.sleep(every_s)
        now = cpu_s()
        if (now - last) * 1e3 < quiet_ms:
            return
        last = now


class LoaderWorker:
    SKIP = 10   # the prefetched batches come out at once: not timed
    TIMED = 30

    def __init__(self, np, arg, path):
        from loaderx.zrecord import DenseStore
        from loaderx.dataloader import DataLoader
        streams = {"data": DenseStore(os.path.join(path, "data")),
                   "label": DenseStore(os.path.join(path, "label"))}
        self.loader = DataLoader(streams, num_workers=4, batch_size=256)
        self.loader_round()  # warm; ends with the pipeline refilled

    def loader_round(self):
        it = self.loader
        for _ in range(self.SKIP):
            next(it)
        t = time.perf_counter()
        for _ in range(self.TIMED):
            b = next(it)
            assert b["data"].shape == (256, 256 << 10)
            del b
        s = (time.perf_counter() - t) / self.TIMED
        settle()
        return {"s": s, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


WORKERS = {"dense": DenseWorker, "ceiling": CeilingWorker, "write": WriteWorker,
           "ragged": RaggedWorker, "sampler": SamplerWorker, "loader": LoaderWorker}


def serve(kind, arg, path):
    import numpy as np
    w = WORKERS[kind](np, arg, path)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "quit":
            if kind == "loader":
                w.loader.close()
            break
        print(json.dumps(getattr(w, cmd)()), flush=True)


# ---------------------------------------------------------------------------
# driver

def clean_env():
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def run_build(python, task, arg, path):
    proc = subprocess.run([python, os.path.abspath(__file__), "build", task, arg, path],
                          capture_output=True, text=True, env=clean_env())
    if proc.returncode:
        raise SystemExit(f"{python} build {task} {arg} failed:\n{proc.stderr}")


class Server:
    def __init__(self, python, kind, arg, path):
        self.name = f"{python} {kind} {arg}"
        self.p = subprocess.Popen([python, os.path.abspath(__file__), "serve", kind, arg, path],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=clean_env())
        self._read()

    def _read(self):
        line = self.p.stdout.readline()
        if not line:
            raise SystemExit(f"{self.name} failed:\n{self.p.stderr.read()}")
        return json.loads(line)

    def __call__(self, cmd):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        return self._read()

    def close(self):
        try:
            self.p.stdin.write("quit\n")
            self.p.stdin.close()
        except BrokenPipeError:
            pass
        self.p.wait()


def median(xs):
    xs = sorted(xs)
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2


def interleave(servers, cmd, rounds):
    """`rounds` rounds of `cmd` (or `cmd[name]` per server) on every server
    in turn: {name: [result, ...]}."""
    out = {name: [] for name in servers}
    names = list(servers)
    for k in range(rounds):
        # Rotate who goes first, so no side always follows the same one.
        for name in names[k % len(names):] + names[:k % len(names)]:
            out[name].append(servers[name](cmd[name] if isinstance(cmd, dict) else cmd))
    if VERBOSE:
        for name, rs in out.items():
            print(f"  {cmd} {name}: " + " ".join(f"{r['s'] * 1e3:.2f}" for r in rs) + " ms",
                  file=sys.stderr, flush=True)
    return out


def row_names():
    names = []
    for kib in (256, 4):
        for codec in ("raw", "zstd", "zstd_dict"):
            names.append(f"gather-{kib}-{codec}")
    names += ["write-256-zstd_dict", "write-4-zstd_dict", "ragged-raw", "ragged-zstd",
              "sampler-256", "sampler-1024", "sampler-8192", "loader-raw", "loader-zstd"]
    return names


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        return serve(*sys.argv[2:5])
    if len(sys.argv) > 1 and sys.argv[1] == "build":
        return build(*sys.argv[2:5])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ours", required=False)
    ap.add_argument("--ref", required=False)
    ap.add_argument("--ceiling", default=None,
                    help="python with numpy + zstandard for the decode-ceiling rows")
    ap.add_argument("--rows", default="*", help="comma-separated row names or patterns (--list)")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds per row")
    ap.add_argument("--list", action="store_true", help="print the row names and exit")
    ap.add_argument("-v", "--verbose", action="store_true", help="per-round times on stderr")
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    ap.add_argument("--json", default=None, help="also write the rows as JSON here (for plot_gather.py)")
    args = ap.parse_args()
    if args.list:
        print("\n".join(row_names()))
        return
    if not (args.ours and args.ref):
        ap.error("--ours and --ref are required")
    global VERBOSE
    VERBOSE = args.verbose
    pats = [p.strip() for p in args.rows.split(",") if p.strip()]
    selected = [r for r in row_names() if any(fnmatch.fnmatchcase(r, p) for p in pats)]
    if not selected:
        ap.error(f"no row matches {args.rows!r} (see --list)")
    base = tempfile.mkdtemp(prefix="lx-bench-", dir=args.dir)
    table = []
    R = args.rounds
    load = os.getloadavg()
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"{R} interleaved rounds per row; medians", flush=True)
    print("| row | loaderx 1.7.2 | ours | ours vs ref (median of rounds) | vs ceiling |\n"
          "|---|---|---|---|---|", flush=True)

    def emit(label, unit, ref, ours, ratio, extra="", **more):
        line = f"| {label} | {ref:.1f} {unit} | {ours:.1f} {unit} | {ratio:.2f}x | {extra} |"
        table.append({"row": label, "unit": unit, "ref": ref, "ours": ours, "ratio": ratio, **more})
        print(line, flush=True)

    def stores(task, arg):
        """A store the reference writes once, and a copy per side."""
        src = os.path.join(base, f"{task}-{arg}".replace(":", "-"))
        run_build(args.ref, task, arg, src)
        paths = {}
        for side in ("ref", "ours"):
            paths[side] = f"{src}.{side}"
            shutil.copytree(src, paths[side])
        return src, paths

    try:
        for row in selected:
            kind, _, rest = row.partition("-")
            if kind == "gather":
                kib, codec = rest.split("-", 1)
                arg = f"{codec}:{kib}"
                rb = int(kib) << 10
                src, paths = stores("dense", arg)
                srv = {"ref": Server(args.ref, "dense", arg, paths["ref"]),
                       "ours": Server(args.ours, "dense", arg, paths["ours"])}
                if codec != "raw" and args.ceiling:
                    srv["ceiling"] = Server(args.ceiling, "ceiling", arg, src)
                res = interleave(srv, "gather", R)
                mibs = {k: median([BATCH * rb / r["s"] / MiB for r in v]) for k, v in res.items()}
                ratio = median([r["s"] / o["s"] for r, o in zip(res["ref"], res["ours"])])
                extra, more = "", {}
                if "ceiling" in res:
                    oc = median([c["s"] / o["s"] for c, o in zip(res["ceiling"], res["ours"])])
                    rc = median([c["s"] / r["s"] for c, r in zip(res["ceiling"], res["ref"])])
                    cm = {k: median([BATCH * rb / c[k] / MiB for c in res["ceiling"]])
                          for k in ("multi_s", "warm_s")}
                    extra = (f"ours {oc:.2f}, ref {rc:.2f} of {mibs['ceiling']:.0f} MiB/s "
                             f"(multi_decompress {cm['multi_s']:.0f}, warm readinto {cm['warm_s']:.0f}; "
                             f"frames {res['ceiling'][0]['ratio']:.2f}:1)")
                    more = {"ceiling": mibs["ceiling"], "ours_vs_ceiling": oc, "ref_vs_ceiling": rc,
                            "ceiling_multi": cm["multi_s"], "ceiling_warm": cm["warm_s"]}
                emit(f"dense gather {kib} KiB {codec}", "MiB/s", mibs["ref"], mibs["ours"],
                     ratio, extra, **more)
                if codec == "raw":
                    pair = {k: srv[k] for k in ("ref", "ours")}
                    res = interleave(pair, "held", max(3, R // 2))
                    mh = {k: median([BATCH * rb / r["s"] / MiB for r in v]) for k, v in res.items()}
                    ratio = median([r["s"] / o["s"] for r, o in zip(res["ref"], res["ours"])])
                    emit(f"dense gather {kib} KiB raw, all 20 batches held", "MiB/s",
                         mh["ref"], mh["ours"], ratio)
                    if rb >= 64 << 10:
                        c = median([BATCH * rb / srv["ours"]("copy")["s"] / MiB for _ in range(3)])
                        print(f"| memcpy ceiling {kib} KiB (same records from RAM into a warm "
                              f"output, a thread per core) | | {c:.1f} MiB/s | | ref "
                              f"{mibs['ref'] / c:.2f}, ours {mibs['ours'] / c:.2f} |", flush=True)
                        table.append({"row": f"memcpy ceiling {kib} KiB", "unit": "MiB/s",
                                      "ceiling": c})
                for s in srv.values():
                    s.close()
            elif kind == "write":
                kib, codec = rest.split("-", 1)
                arg = f"{codec}:{kib}"
                src = os.path.join(base, f"write-{kib}")
                os.makedirs(src)
                run_build(args.ref, "dict", arg, os.path.join(src, "dict.bin"))
                srv = {"ref": Server(args.ref, "write", arg, src),
                       "ours": Server(args.ours, "write", arg, src)}
                res = interleave(srv, "write", R)
                m = {k: median([r["MiBs"] for r in v]) for k, v in res.items()}
                cpu = {k: median([r["cpu"] for r in v]) for k, v in res.items()}
                ratio = median([r["s"] / o["s"] for r, o in zip(res["ref"], res["ours"])])
                cpu_ratio = median([r["cpu_s"] / o["cpu_s"] for r, o in zip(res["ref"], res["ours"])])
                emit(f"zstd_dict write {kib} KiB (16 MiB per round, same dictionary, level 19)",
                     "MiB/s", m["ref"], m["ours"], ratio,
                     f"CPU busy: ref {cpu['ref']:.2f}, ours {cpu['ours']:.2f} cores; "
                     f"CPU seconds ref / ours {cpu_ratio:.2f}",
                     cpu_ref=cpu["ref"], cpu_ours=cpu["ours"], cpu_ratio=cpu_ratio)
                for s in srv.values():
                    s.close()
            elif kind == "ragged":
                src, paths = stores("ragged", rest)
                srv = {k: Server(getattr(args, k), "ragged", rest, paths[k]) for k in ("ref", "ours")}
                res = interleave(srv, "gather", R)
                m = {k: median([BATCH / r["s"] / 1000 for r in v]) for k, v in res.items()}
                ratio = median([r["s"] / o["s"] for r, o in zip(res["ref"], res["ours"])])
                emit(f"ragged gather {rest} (256 records)", "krec/s", m["ref"], m["ours"], ratio)
                # Ours packed (one array + offsets) against the reference's
                # list, the only form it has.
                res = interleave(srv, {"ref": "gather", "ours": "packed"}, R)
                m = {k: median([BATCH / r["s"] / 1000 for r in v]) for k, v in res.items()}
                ratio = median([r["s"] / o["s"] for r, o in zip(res["ref"], res["ours"])])
                emit(f"ragged gather {rest}, ours packed (ref: list)", "krec/s",
                     m["ref"], m["ours"], ratio)
                for s in srv.values():
                    s.close()
            elif kind == "sampler":
                srv = {k: Server(getattr(args, k), "sampler", rest, base) for k in ("ref", "ours")}
                res = interleave(srv, "sample", R)
                us = {k: median([r["s"] * 1e6 for r in v]) for k, v in res.items()}
                vs = {k: median([r["numpy_s"] / r["s"] for r in v]) for k, v in res.items()}
                ratio = median([r["s"] / o["s"] for r, o in zip(res["ref"], res["ours"])])
                label = f"sampler IID batch {rest} (per batch; vs numpy in the same process)"
                print(f"| {label} | {us['ref']:.2f} us ({vs['ref']:.2f}x numpy) | "
                      f"{us['ours']:.2f} us ({vs['ours']:.2f}x numpy) | {ratio:.2f}x | |", flush=True)
                table.append({"row": label, "unit": "us", "ref": us["ref"], "ours": us["ours"],
                              "ratio": ratio, "ref_vs_numpy": vs["ref"], "ours_vs_numpy": vs["ours"]})
                for s in srv.values():
                    s.close()
            elif kind == "loader":
                src, paths = stores("loader", rest)
                srv = {k: Server(getattr(args, k), "loader", rest, paths[k]) for k in ("ref", "ours")}
                res = interleave(srv, "loader_round", max(3, R // 2))
                bs = {k: median([1 / r["s"] for r in v]) for k, v in res.items()}
                rss = {k: max(r["rss"] for r in v) for k, v in res.items()}
                ratio = median([r["s"] / o["s"] for r, o in zip(res["ref"], res["ours"])])
                emit(f"DataLoader 256 KiB x 256, 4 workers, {rest}", "batches/s",
                     bs["ref"], bs["ours"], ratio)
                emit(f"DataLoader peak RSS, {rest} (ratio: ref / ours)", "MiB",
                     rss["ref"], rss["ours"], rss["ref"] / rss["ours"])
                for s in srv.values():
                    s.close()
            shutil.rmtree(base, ignore_errors=True)
            os.makedirs(base, exist_ok=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    load = os.getloadavg()
    print(f"load average at end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(table, f, indent=1)


if __name__ == "__main__":
    main()
