"""Recycled gather buffers: dense gathers of 256 KiB and more fill a pooled,
page-aligned region that NumPy views and that returns to the pool when the
array dies. Guards against a recycled region being handed out while an array
or a view still uses it, stale bytes leaking into a result, and wrong
dtype/shape/flags on pooled results."""

import gc

import numpy as np
import pytest

from loaderx.zrecord import DenseStore

from conftest import ours_only, structured_dtype

pytestmark = ours_only

ROW = 64 << 10  # 4 rows = 256 KiB, the pooling threshold


def _addr(a):
    return a.__array_interface__["data"][0]


def _store(codec, n=32, dtype=np.uint8):
    rng = np.random.default_rng(3)
    itemsize = np.dtype(dtype).itemsize
    data = rng.integers(0, 256, size=(n, ROW), dtype=np.uint8).view(dtype)
    data = data.reshape(n, ROW // itemsize)
    with DenseStore("pool", data.dtype, data.shape[1:], codec=codec) as ds:
        ds.append(data)
    return DenseStore("pool"), data


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_pooled_results_are_exact_and_reuse_freed_buffers(codec):
    ds, data = _store(codec)
    idx = [5, 0, 31, 5, 7, 9, 1, 2]
    a = ds[idx]
    np.testing.assert_array_equal(a, data[idx])
    assert a.shape == (8, ROW) and a.dtype == np.uint8
    assert a.flags.c_contiguous and a.flags.writeable and a.flags.aligned
    assert _addr(a) % 4096 == 0
    first = _addr(a)
    del a
    gc.collect()
    other = [30, 29, 28, 27, 26, 25, 24, 23]
    b = ds[other]
    assert _addr(b) == first, "a freed buffer of the same size is reused"
    np.testing.assert_array_equal(b, data[other])  # no stale bytes
    ds.close()


def test_a_live_view_keeps_its_buffer_out_of_the_pool():
    ds, data = _store("raw")
    a = ds[list(range(8))]
    row = a[3]
    first = _addr(a)
    del a
    gc.collect()
    b = ds[list(range(8, 16))]
    assert _addr(b) != first
    np.testing.assert_array_equal(row, data[3])
    b[:] = 0  # writing the new result cannot touch the view
    np.testing.assert_array_equal(row, data[3])
    ds.close()


def test_pooled_gather_keeps_dtype_and_item_shape():
    dt = structured_dtype()
    n_items = ROW // dt.itemsize
    rng = np.random.default_rng(4)
    data = np.frombuffer(rng.bytes(16 * n_items * dt.itemsize), dtype=dt).reshape(16, n_items)
    with DenseStore("s", dt, (n_items,), codec="raw") as ds:
        ds.append(data)
    with DenseStore("s") as ds:
        out = ds[np.arange(16)[::-1]]
        assert out.dtype == dt and out.shape == (16, n_items)
        assert out.tobytes() == data[::-1].tobytes()
    with DenseStore("f", np.float64, (4, ROW // 32), codec="raw") as ds:
        x = np.arange(8 * 4 * (ROW // 32), dtype=np.float64).reshape(8, 4, ROW // 32)
        ds.append(x)
        np.testing.assert_array_equal(ds[[7, 1, 3, 0]], x[[7, 1, 3, 0]])


def test_failed_gather_leaves_pool_usable_and_bounded():
    from loaderx import _native
    from loaderx.zrecord import IndexOutOfRange
    ds, data = _store("raw")
    with pytest.raises(IndexOutOfRange):
        ds[[0, 1, 2, 99]]
    outs = [ds[list(range(k, k + 8))] for k in range(0, 24, 4)]
    for k, o in zip(range(0, 24, 4), outs):
        np.testing.assert_array_equal(o, data[k:k + 8])
    del outs, o
    gc.collect()
    regions, idle = _native.buffer_pool_stats()
    assert regions >= 1 and idle <= 256 << 20
    ds.close()


def test_no_numpy_operation_frees_a_region_a_live_object_still_uses():
    """NumPy may not resize a pooled array (it does not own its data), a
    pickle round trip copies, and a buffer export, or a view of an array
    whose ``__setstate__`` swapped its memory, keeps the region out of the
    pool while it lives. (``__setstate__`` under a live memoryview is a
    use-after-free in NumPy itself, pooled or not, so it is not tried.)"""
    import pickle

    ds, data = _store("raw")
    a = ds[list(range(8))]
    first = _addr(a)
    for refcheck in (True, False):
        with pytest.raises(ValueError, match="does not own its data"):
            a.resize((4, ROW), refcheck=refcheck)
    again = pickle.loads(pickle.dumps(a))
    assert _addr(again) != first
    np.testing.assert_array_equal(again, data[:8])
    mv = memoryview(a)
    del a, again
    gc.collect()
    b = ds[list(range(8, 16))]
    assert _addr(b) != first, "a region with a live buffer export is reused"
    np.testing.assert_array_equal(np.asarray(mv)[3], data[3])
    row = np.asarray(mv)[5]
    del mv
    gc.collect()
    c = ds[list(range(16, 24))]
    assert _addr(c) != first, "a region a view still uses is reused"
    holder = c[2]
    c.__setstate__(c.__reduce__()[2])  # c now owns a copy; holder views its region
    del c, b
    gc.collect()
    d, e = ds[list(range(24, 32))], ds[list(range(0, 8))]
    np.testing.assert_array_equal(row, data[5])
    np.testing.assert_array_equal(holder, data[18])
    np.testing.assert_array_equal(d, data[24:32])
    np.testing.assert_array_equal(e, data[0:8])
    ds.close()


def test_ragged_buffers_are_recycled_within_bounds_and_can_be_turned_off():
    """Ragged gathers return views of a pooled buffer: after a loop of
    batches of every size, 30 of them alive at once, the pool holds at most
    16 idle buffers and 64 MiB, a later gather reuses one, and with
    ``LOADERX_BUFFER_POOL_MB=0`` nothing is kept."""
    import os
    import subprocess
    import sys
    import textwrap

    from loaderx import _native
    from loaderx.zrecord import RaggedStore

    rng = np.random.default_rng(4)
    recs = [np.arange(int(n), dtype=np.int32) for n in rng.integers(1, 5000, 400)]
    with RaggedStore("rpool", np.int32, codec="raw") as rs:
        rs.append(recs)
    rs = RaggedStore("rpool", read_only=True)
    held = []
    for k in range(300):
        idx = rng.integers(0, 400, int(rng.integers(1, 400)))
        got = rs[idx]
        for g, i in zip(got[:3], idx[:3]):
            np.testing.assert_array_equal(g, recs[i])
        if k % 10 == 0:
            held.append(got)  # 30 batches alive at once, freed together
        del got
    del held
    gc.collect()
    n, idle = _native.ragged_pool_stats()
    assert 1 <= n <= 16 and 0 < idle <= 64 << 20, (n, idle)
    got = rs[list(range(50))]
    assert _native.ragged_pool_stats()[0] == n - 1, "a gather takes an idle buffer"
    del got
    rs.close()

    code = textwrap.dedent("""
        import gc, numpy as np
        from loaderx import _native
        from loaderx.zrecord import RaggedStore
        rs = RaggedStore("rpool", read_only=True)
        for k in range(20):
            x = rs[list(range(k, k + 100))]
        del x
        gc.collect()
        print(_native.ragged_pool_stats())
    """)
    env = dict(os.environ, LOADERX_BUFFER_POOL_MB="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == "(0, 0)", out
