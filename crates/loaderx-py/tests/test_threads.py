"""Concurrent gathers from Python threads are safe and return the right
records (the native gather runs with the GIL released)."""

import threading

import numpy as np
import pytest

from conftest import ours_only
from loaderx.zrecord import DenseStore, RaggedStore


def test_concurrent_gathers():
    rng = np.random.default_rng(4)
    data = rng.integers(0, 1 << 30, size=(500, 257), dtype=np.int64)
    recs = [np.arange(i % 31 + 1, dtype=np.int16) * i for i in range(500)]
    errors = []
    with DenseStore("d", data.dtype, (257,), codec="zstd") as ds, \
         RaggedStore("r", np.int16) as rs:
        ds.append(data)
        rs.append(recs)

        def reader(seed):
            try:
                r = np.random.default_rng(seed)
                for _ in range(30):
                    idx = r.integers(0, 500, size=64)
                    assert ds[idx].tobytes() == data[idx].tobytes()
                    for got, k in zip(rs[idx], idx):
                        assert got.tobytes() == recs[k].tobytes()
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        threads = [threading.Thread(target=reader, args=(s,)) for s in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors[0]


def test_gather_while_appending():
    data = np.arange(200 * 8, dtype=np.float64).reshape(200, 8)
    errors = []
    with DenseStore("d", data.dtype, (8,)) as ds:
        ds.append(data[:100])
        stop = threading.Event()

        def reader():
            try:
                while not stop.is_set():
                    n = min(len(ds), 100)
                    assert ds[:n].tobytes() == data[:n].tobytes()
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        t = threading.Thread(target=reader)
        t.start()
        for k in range(100, 200, 10):
            ds.append(data[k:k + 10])
        stop.set()
        t.join()
        assert ds[:].tobytes() == data.tobytes()
    assert not errors, errors[0]


@ours_only
@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_gather_while_deleting(kind):
    """What ``delete``'s docstring promises: gathers from other threads
    wait for a running delete, so each returns whole records (at their old
    or new index) or ``IndexOutOfRange`` for an index past the new length,
    never a torn or foreign record."""
    from loaderx.zrecord import IndexOutOfRange

    n = 2000
    errors, seen = [], [0]
    with (DenseStore("d", np.int64, (64,)) if kind == "dense"
          else RaggedStore("r", np.int64)) as s:
        if kind == "dense":
            s.append(np.repeat(np.arange(n, dtype=np.int64)[:, None], 64, axis=1))
        else:
            s.append([np.full(i % 50 + 1, i, dtype=np.int64) for i in range(n)])
        stop = threading.Event()

        def reader(seed):
            r = np.random.default_rng(seed)
            try:
                while not stop.is_set():
                    try:
                        got = s[r.integers(0, max(len(s), 1), size=32)]
                    except IndexOutOfRange:
                        continue
                    for rec in got:
                        i = int(rec.flat[0])
                        assert 0 <= i < n and (rec == i).all(), rec
                        assert kind == "dense" or rec.shape == (i % 50 + 1,), rec.shape
                    seen[0] += 1
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        threads = [threading.Thread(target=reader, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        rng = np.random.default_rng(9)
        while len(s) > 100:
            s.delete(rng.choice(len(s), size=40, replace=False))
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors[0]
    assert seen[0] > 0
