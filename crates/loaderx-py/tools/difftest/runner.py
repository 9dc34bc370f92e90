"""Executes difftest programs in ONE implementation (whatever `loaderx` imports).

usage: python runner.py PROGRAMS.json RESULTS.jsonl START
Each program: {"id":..., "dir": abs path, "steps": [code, ...]}.
A step is Python source, exec'd; when its last statement is an expression,
that expression's value is recorded (else the value is None). A step
"#kill" records {"t": "killed"} and SIGKILLs the runner (a writer killed
with work pending; the program's later steps never run). Results are appended to
RESULTS.jsonl one line per step ({"id", "i", "r"}), and a line
{"id", "done": true} after each program, flushed, so a crash or hang
identifies the program and step.
"""
import ast
import copy
import gc
import hashlib
import json
import os
import re
import signal
import sys
import traceback
import warnings

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


def _filler(dt, name):
    """Whether field `name` of `dt` is one of the reference's filler fields
    ('f1', 'f3', ... plain void fields standing for padding)."""
    f = dt.fields[name][0]
    return re.fullmatch(r"f\d+", name) is not None and f.kind == "V" and f.names is None \
        and (f.subdtype is None or f.subdtype[0].names is None)


def _canon_nofill(v):
    """canon_bytes without filler fields, at every depth (a padded struct
    nested in another, or in a subarray field, has its own fillers there)."""
    if v.dtype.names:
        return b"".join(_canon_nofill(np.ascontiguousarray(v[n]))
                        for n in v.dtype.names if not _filler(v.dtype, n))
    return np.ascontiguousarray(v).tobytes()


def field_sha(v):
    """sha of a structured array's values without the reference's filler
    fields (a padded dtype read back there has 'f1', 'f3', ... void fields
    standing for its padding, nested ones included; here it keeps its
    offsets): the same for both packages when the records are."""
    return hashlib.sha1(_canon_nofill(v)).hexdigest()[:16]


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
                "w": bool(v.flags.writeable), "c": bool(v.flags.c_contiguous),
                **({"fsha": field_sha(v)} if v.dtype.names else {})}
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


def _divisor(s, g):
    """A divisor of s (s > 0), picked by g; 1 or s when s is prime."""
    ds = [d for d in range(1, s + 1) if s % d == 0]
    return ds[int(g.integers(0, len(ds)))]


def layout(a, form, seed=0):
    """The 1-D array `a` in another layout with the same size (so a mask
    of the store's length stays one): N-D shapes, non-contiguous and
    negative-stride views, zero strides, 0-d, Python containers. Index
    and mask generators of difftest.py (seeded, so both sides get the
    same object)."""
    g = np.random.default_rng(seed)
    s = a.size
    if form == "1d":
        return a
    if form == "col":
        return a.reshape(s, 1)
    if form == "row":
        return a.reshape(1, s)
    if form == "2d":
        d = _divisor(s, g) if s else 0
        return a.reshape((d, s // d) if s else (int(g.integers(0, 3)), 0))
    if form == "3d":
        d = _divisor(s, g) if s else 1
        return a.reshape((1, d, s // d) if s else (2, 0, 3))
    if form == "T":
        d = _divisor(s, g) if s else 1
        return a.reshape(d, s // d).T if s else a.reshape(0, 2).T
    if form == "rev":
        return a[::-1]
    if form == "rev2d":
        d = _divisor(s, g) if s else 1
        return a.reshape(d, s // d)[::-1, ::-1] if s else a
    if form == "strided":
        b = np.zeros(2 * s, a.dtype)
        b[::2] = a
        return b[::2]
    if form == "strided2d":
        d = _divisor(s, g) if s else 1
        b = np.zeros((d, 2 * (s // d)), a.dtype) if s else np.zeros((1, 0), a.dtype)
        b[:, ::2] = a.reshape(b[:, ::2].shape)
        return b[:, ::2]
    if form == "fortran":
        d = _divisor(s, g) if s else 1
        return np.asfortranarray(a.reshape(d, s // d)) if s else a
    if form == "bcast":
        # zero strides: every entry is the first one
        return np.broadcast_to(a[:1], (s,)) if s else a
    if form == "0d":
        return a.reshape(()) if s == 1 else a
    if form == "list":
        return a.tolist()
    if form == "nested":
        d = _divisor(s, g) if s else 1
        return a.reshape(d, s // d).tolist() if s else []
    if form == "tuple":
        return tuple(a.tolist())
    if form == "npscalars":
        return list(a)  # NumPy scalars of a's dtype
    if form == "mixed":
        return [x if k % 2 else x.item() for k, x in enumerate(a)]
    if form == "unaligned":
        b = np.zeros(a.nbytes + 1, np.uint8)[1:].view(a.dtype)
        b[:] = a
        return b
    if form == "readonly":
        b = a.copy()
        b.flags.writeable = False
        return b
    raise ValueError(form)


def bmask(n, seed, form="1d", p=0.5, delta=0):
    """A boolean mask of n + delta entries (seeded), in layout `form`."""
    g = np.random.default_rng(seed)
    m = g.random(max(0, n + delta)) < p
    return layout(m, form, seed)


def iarr(n, seed, k, dt="i8", form="1d", neg=True, oob=0):
    """k record indices into n records (negatives too, where `neg` and the
    dtype is signed), of dtype `dt` in layout `form`; oob > 0 puts one
    index oob past the end (or before the start, for odd oob)."""
    g = np.random.default_rng(seed)
    dt = np.dtype(dt)
    info = np.iinfo(dt)
    lo = -n if (neg and dt.kind == "i") else 0
    hi = max(n, 1)
    v = g.integers(lo, hi, k) if k else np.zeros(0, np.int64)
    if oob and k:
        v[int(g.integers(0, k))] = (-n - oob) if (oob % 2 and dt.kind == "i") else n - 1 + oob
    v = np.clip(v, info.min, info.max)
    return layout(v.astype(dt), form, seed)


def rdig(v):
    """A short digest of a read (a list of records, an array, None):
    (kind, count, sha of every record's dtype, shape and bytes). Programs
    with thousands of ragged records compare this instead of one encoding
    per record."""
    if v is None:
        return None
    h = hashlib.sha1()
    if isinstance(v, np.ndarray):
        h.update(f"{v.dtype.str}{v.shape}".encode())
        h.update(canon_bytes(v))
        return ("nd", str(v.dtype), list(v.shape), h.hexdigest()[:16])
    for x in v:
        x = np.asarray(x)
        h.update(f"{x.dtype.str}{x.shape}|".encode())
        h.update(canon_bytes(x))
    return (type(v).__name__, len(v), h.hexdigest()[:16])


def split_step(code):
    """(statements, final expression) of a step, compiled: a step whose last
    statement is an expression has that expression's value recorded, on
    one line or after others (until session 14 a step of several lines was
    exec'd whole and only whether it raised was compared)."""
    tree = ast.parse(code, "<step>", "exec")
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
        body = compile(tree, "<step>", "exec") if tree.body else None
        return body, compile(last, "<step>", "eval")
    return compile(tree, "<step>", "exec"), None


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
                zrecord=zrecord, enc=enc, mk=mk, dirprint=dirprint, os=os,
                layout=layout, bmask=bmask, iarr=iarr, copy=copy,
                rdig=rdig)
    for prog in progs[start:]:
        os.makedirs(prog["dir"], exist_ok=True)
        os.chdir(prog["dir"])
        ns = dict(base)
        for i, code in enumerate(prog["steps"]):
            out.write(json.dumps({"id": prog["id"], "i": i, "start": True}) + "\n")
            out.flush()
            if code.startswith("#kill"):
                # The program's process dies here as a killed writer does
                # (SIGKILL: no close, no destructor, no flush); its stores
                # stay as they are for the next stage. The tester restarts
                # the runner at the next program.
                out.write(json.dumps({"id": prog["id"], "i": i, "r": {"t": "killed"}}) + "\n")
                out.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            # Warnings are recorded (by category) and compared: one that
            # only ours emits is an error under -W error.
            with warnings.catch_warnings(record=True) as ws:
                warnings.simplefilter("always")
                try:
                    body, last = split_step(code)
                    if body is not None:
                        exec(body, ns)
                    v = eval(last, ns) if last is not None else None
                    r = enc(v) if last is not None else {"t": "ok"}
                    del v
                    gc.collect()
                except BaseException as e:  # noqa
                    if isinstance(e, KeyboardInterrupt):
                        raise
                    r = exc_enc(e)
            ws = [w for w in ws if not issubclass(w.category, ResourceWarning)]
            if ws:
                r["warn"] = sorted({w.category.__name__ for w in ws})
                r["warnmsg"] = "; ".join(sorted({str(w.message)[:100] for w in ws}))[:300]
            out.write(json.dumps({"id": prog["id"], "i": i, "r": r}) + "\n")
            out.flush()
        cleanup(ns)
        out.write(json.dumps({"id": prog["id"], "done": True}) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
