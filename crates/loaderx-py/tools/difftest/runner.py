"""Executes difftest programs in ONE implementation (whatever `loaderx` imports).

usage: python runner.py PROGRAMS.json RESULTS.jsonl START
Each program: {"id":..., "dir": abs path, "steps": [code, ...]}.
A step is Python source: if it parses as an expression its value is
recorded, otherwise it is exec'd (value None). Results are appended to
RESULTS.jsonl one line per step ({"id", "i", "r"}), and a line
{"id", "done": true} after each program, flushed, so a crash or hang
identifies the program and step.
"""
import gc
import hashlib
import json
import os
import sys
import traceback

import numpy as np

import loaderx
from loaderx.zrecord import DenseStore, RaggedStore, ZrecordError, DICT_TIERS
from loaderx.zsampler import Sampler
from loaderx.dataloader import DataLoader
from loaderx.utils import train_dict
import loaderx.zrecord as zrecord

PKG = "loaderx"


def exc_enc(e):
    mro = [c.__name__ for c in type(e).__mro__ if c.__name__ not in ("object", "BaseException")]
    return {"t": "exc", "cls": type(e).__name__, "mro": mro,
            "mod": type(e).__module__, "msg": str(e)[:300],
            "code": getattr(e, "code", None) if isinstance(e, ZrecordError) else None}


def canon_bytes(v):
    """Bytes of an array's values; structured dtypes field by field, so the
    padding bytes (which NumPy copies do not preserve) never count."""
    if v.dtype.names:
        return b"".join(canon_bytes(np.ascontiguousarray(v[n])) for n in v.dtype.names)
    return np.ascontiguousarray(v).tobytes()


def enc(v, depth=0):
    if depth > 6:
        return {"t": "deep"}
    if isinstance(v, BaseException):
        return exc_enc(v)
    if isinstance(v, np.ndarray):
        try:
            b = canon_bytes(v)
        except Exception as e:  # noqa
            b = repr(e).encode()
        return {"t": "nd", "cls": type(v).__name__, "dtype": str(v.dtype), "dstr": v.dtype.str,
                "itemsize": v.dtype.itemsize, "shape": list(v.shape),
                "sha": hashlib.sha1(b).hexdigest()[:16], "nbytes": len(b),
                "w": bool(v.flags.writeable), "c": bool(v.flags.c_contiguous)}
    if isinstance(v, np.generic):
        return {"t": "nps", "cls": type(v).__name__, "dtype": str(v.dtype),
                "bytes": canon_bytes(np.asarray(v)).hex()[:64]}
    if isinstance(v, np.dtype):
        return {"t": "dtype", "v": str(v), "str": v.str, "descr": repr(v.descr), "itemsize": v.itemsize}
    if isinstance(v, (bool, int, float, str, type(None))):
        if isinstance(v, float) and v != v:
            return {"t": "float", "v": "nan"}
        return {"t": type(v).__name__, "v": v if not isinstance(v, int) or abs(v) < 2**53 else str(v)}
    if isinstance(v, (bytes, bytearray)):
        return {"t": type(v).__name__, "len": len(v), "sha": hashlib.sha1(bytes(v)).hexdigest()[:16]}
    if isinstance(v, (list, tuple)):
        return {"t": type(v).__name__, "v": [enc(x, depth + 1) for x in v]}
    if isinstance(v, dict):
        return {"t": "dict", "v": {str(k): enc(x, depth + 1) for k, x in v.items()}}
    if isinstance(v, type):
        return {"t": "type", "v": v.__name__}
    import pathlib
    if isinstance(v, pathlib.PurePath):
        return {"t": "path", "cls": type(v).__name__, "v": str(v)}
    return {"t": "obj", "cls": type(v).__name__}


def dirprint(path):
    """Files under a store dir: name -> (size, sha)."""
    out = {}
    for root, _, files in os.walk(path):
        for f in sorted(files):
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                b = fh.read()
            out[os.path.relpath(p, path)] = [len(b), hashlib.sha1(b).hexdigest()[:12]]
    return out


def mk(dt, n, shape, seed=0, hi=256):
    """n records of `shape` and dtype `dt`, from seeded random bytes in [0, hi)."""
    dt = np.dtype(dt)
    shape = tuple(int(d) for d in shape)
    if dt.hasobject:
        return np.zeros((n, *shape), dt)
    cnt = 1
    for d in shape:
        cnt *= d
    nb = n * cnt * dt.itemsize
    raw = np.random.default_rng(seed).integers(0, hi, size=nb, dtype=np.uint8).tobytes()
    return np.frombuffer(bytearray(raw), dtype=dt).reshape((n, *shape))


def cleanup(ns):
    for v in list(ns.values()):
        try:
            if isinstance(v, (DenseStore, RaggedStore, DataLoader)):
                v.close()
        except BaseException:
            pass
    ns.clear()
    gc.collect()


def main():
    progs = json.load(open(sys.argv[1]))
    out = open(sys.argv[2], "a")
    start = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    base = dict(np=np, DenseStore=DenseStore, RaggedStore=RaggedStore,
                ZrecordError=ZrecordError, DICT_TIERS=DICT_TIERS, Sampler=Sampler,
                DataLoader=DataLoader, train_dict=train_dict, loaderx=loaderx,
                zrecord=zrecord, enc=enc, mk=mk, dirprint=dirprint, os=os)
    for prog in progs[start:]:
        os.makedirs(prog["dir"], exist_ok=True)
        os.chdir(prog["dir"])
        ns = dict(base)
        for i, code in enumerate(prog["steps"]):
            out.write(json.dumps({"id": prog["id"], "i": i, "start": True}) + "\n")
            out.flush()
            try:
                try:
                    c = compile(code, "<step>", "eval")
                    is_expr = True
                except SyntaxError:
                    c = compile(code, "<step>", "exec")
                    is_expr = False
                v = eval(c, ns)
                r = enc(v) if is_expr else {"t": "ok"}
                del v
                gc.collect()
            except BaseException as e:  # noqa
                if isinstance(e, KeyboardInterrupt):
                    raise
                r = exc_enc(e)
            out.write(json.dumps({"id": prog["id"], "i": i, "r": r}) + "\n")
            out.flush()
        cleanup(ns)
        out.write(json.dumps({"id": prog["id"], "done": True}) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
