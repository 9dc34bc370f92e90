"""Python memory the native layer reads or writes with the GIL released,
changed by another Python thread meanwhile.

The native gathers, deletes and appends run detached, so another thread can
rewrite an index array it was handed while it works. Validation and use
must see the same indices: whatever the other thread does, a call returns
the records of one consistent index list or raises a clean ``IndexError``,
and never a Rust panic (``PanicException``, a ``BaseException``), a crash,
wrong records or damage to other records.

Regression: the index array was read in place while detached. The ragged
gather checked the range in one pass and doubled each index in another, so
an index flipped to ``2**63 + j`` in between overflowed (a panic in debug
builds, record ``j`` silently in release ones); a delete checked, then
copied, so a flipped index deleted the wrong records.
"""

import sys
import threading
import time

import numpy as np
import pytest

from loaderx.zrecord import DenseStore, RaggedStore

from conftest import ours_only

pytestmark = ours_only

N = 400


@pytest.fixture(autouse=True)
def _fast_switches():
    """Hand the GIL over often, so the flipping thread runs during calls."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def _flipping(good, bad):
    """An index array that a background thread rewrites in place, between
    `good` and `bad`, until the returned event is set."""
    idx = good.copy()
    stop = threading.Event()

    def flip():
        while not stop.is_set():
            idx[:] = bad
            idx[:] = good

    t = threading.Thread(target=flip, daemon=True)
    t.start()
    return idx, stop, t


def _hammer(call, check, good, bad, seconds=0.75, readers=3):
    """Runs `call(idx)` from `readers` threads for `seconds` while `idx`
    flips between `good` and `bad`; each result must pass `check`, each
    failure must be an IndexError. Returns (successes, index errors)."""
    idx, stop, flipper = _flipping(good, bad)
    problems, counts = [], [0, 0]
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def read():
        while time.monotonic() < deadline and not problems:
            try:
                got = call(idx)
            except IndexError:
                with lock:
                    counts[1] += 1
                continue
            except BaseException as exc:  # noqa: BLE001 — PanicException too
                problems.append(exc)
                return
            try:
                check(got)
            except BaseException as exc:  # noqa: BLE001
                problems.append(exc)
                return
            with lock:
                counts[0] += 1

    threads = [threading.Thread(target=read) for _ in range(readers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    flipper.join()
    if problems:
        raise problems[0]
    return counts


def _indices(n, size, seed):
    """`size` valid indices, and for each a huge value that wraps to a
    different valid record when doubled in 64 bits (what the ragged layer
    does to reach a record's two physical halves)."""
    good = np.random.default_rng(seed).integers(0, n, size=size).astype(np.uint64)
    bad = (np.roll(good, 1) + np.uint64(2**63)).astype(np.uint64)
    return good, bad


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_ragged_gather_of_a_flipping_index_array(codec):
    recs = [np.full(k % 7 + 1, k, dtype=np.int32) for k in range(N)]
    good, bad = _indices(N, 1500, 1)
    want = [recs[k].tobytes() for k in good]
    with RaggedStore("r", np.int32, codec=codec) as rs:
        rs.append(recs)

        def check_list(got):
            assert [g.tobytes() for g in got] == want

        def check_packed(got):
            values, offsets, _ = got
            assert values.tobytes() == b"".join(want)
            assert len(offsets) == len(good) + 1

        _hammer(rs.__getitems__, check_list, good, bad)
        _hammer(rs.gather_packed, check_packed, good, bad)


@pytest.mark.parametrize("record_bytes", [64, 4096])
def test_dense_gather_of_a_flipping_index_array(record_bytes):
    data = np.arange(N * record_bytes // 8, dtype=np.int64).reshape(N, -1)
    good, bad = _indices(N, 1500, 2)
    want = data[good.astype(np.int64)].tobytes()
    with DenseStore("d", data.dtype, data.shape[1:], codec="raw") as ds:
        ds.append(data)
        mine = threading.local()  # each reader fills its own array

        def gather_into(i):
            if not hasattr(mine, "out"):
                mine.out = np.empty((len(good), data.shape[1]), dtype=data.dtype)
            return ds.gather_into(i, mine.out)

        def check(got):
            assert got.tobytes() == want

        _hammer(ds.__getitems__, check, good, bad)
        _hammer(gather_into, check, good, bad)


@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_delete_of_a_flipping_index_array(kind):
    """Each delete removes exactly the records of the valid list, or
    nothing (IndexError): never other records, never a panic."""
    n = 40000
    good = np.arange(0, n // 2, 2, dtype=np.uint64)
    bad = (np.roll(good, 1) + np.uint64(2**63)).astype(np.uint64)
    keep = np.setdiff1d(np.arange(n), good.astype(np.int64))
    deleted = refused = 0
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and deleted + refused < 200:
        path = f"s{deleted + refused}"
        if kind == "dense":
            s = DenseStore(path, np.int64, (1,), codec="raw")
            s.append(np.arange(n, dtype=np.int64).reshape(-1, 1))
        else:
            s = RaggedStore(path, np.int64, codec="raw")
            s.append(np.arange(n, dtype=np.int64).reshape(-1, 1))
        idx, stop, flipper = _flipping(good, bad)
        try:
            s.delete(idx)
        except IndexError:
            refused += 1
            assert len(s) == n
        else:
            deleted += 1
            assert len(s) == len(keep)
            left = s[:] if kind == "dense" else np.concatenate(s[:])
            np.testing.assert_array_equal(np.sort(left.reshape(-1)), keep)
        finally:
            stop.set()
            flipper.join()
            s.close()


def test_index_normalisation_never_hands_on_the_callers_array():
    """What the native store reads detached is a copy the checks ran on:
    `_idxs` returns a new array for every index array, long or short,
    uint64 already in range included (it was returned as it was)."""
    with DenseStore("d", np.uint8, (1,)) as ds:
        ds.append(np.zeros((10, 1), np.uint8))
        for n in (5, 3000):  # the native check, and NumPy's for long ones
            for dtype in (np.uint64, np.int64, np.uint32):
                idx = (np.arange(n) % 10).astype(dtype)
                got = ds._idxs(idx)
                assert not np.shares_memory(got, idx), (n, dtype)
                np.testing.assert_array_equal(got, np.arange(n) % 10)
