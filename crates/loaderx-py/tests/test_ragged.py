"""RaggedStore public behaviour: exact per-record shapes (scalars included),
bytes records, validation, maintenance. Guards the ragged contract."""

import math

import numpy as np
import pytest

from loaderx.zrecord import DenseStore, RaggedStore, ZrecordError

from conftest import ours_only, structured_dtype


def records(rng, n, dtype=np.int32):
    out = []
    for i in range(n):
        rank = i % 4
        shape = tuple(int(d) for d in rng.integers(1, 6, size=rank))
        out.append(rng.integers(-1000, 1000, size=shape).astype(dtype))
    return out


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_roundtrip_shapes(codec):
    rng = np.random.default_rng(2)
    recs = records(rng, 50)
    with RaggedStore("r", np.int32, codec=codec) as rs:
        assert rs.append(recs[:20]) == 0
        assert rs.append(iter(recs[20:])) == 20
    rs = RaggedStore("r")
    assert len(rs) == 50 and rs.dtype == np.int32 and rs.codec == codec
    assert not hasattr(rs, "item_shape")
    got = rs[0, 2, 4]
    assert isinstance(got, list) and len(got) == 3
    for g, k in zip(got, (0, 2, 4)):
        assert g.shape == recs[k].shape and g.dtype == np.int32
        np.testing.assert_array_equal(g, recs[k])
    assert rs[0].shape == ()  # rank-0 record keeps shape ()
    np.testing.assert_array_equal(rs[-1], recs[-1])
    for got, want in zip(rs[::-3], recs[::-3]):
        np.testing.assert_array_equal(got, want)
    mask = np.zeros(50, bool)
    mask[[3, 7]] = True
    assert [g.shape for g in rs[mask]] == [recs[3].shape, recs[7].shape]
    assert rs[[]] == []
    rs.close()


def test_readme_padding_example():
    seqs = [np.arange(L, dtype=np.int32) for L in (3, 1, 4, 1, 5)]
    with RaggedStore("tokens", np.int32) as rs:
        rs.append(seqs)
    rs = RaggedStore("tokens")
    recs = rs[0, 2, 4]
    lengths = np.array([len(r) for r in recs])
    padded = np.zeros((len(recs), lengths.max()), dtype=recs[0].dtype)
    for i, r in enumerate(recs):
        padded[i, :len(r)] = r
    np.testing.assert_array_equal(padded, [[0, 1, 2, 0, 0], [0, 1, 2, 3, 0], [0, 1, 2, 3, 4]])
    rs.close()


def test_bytes_records():
    with RaggedStore("b", np.uint8) as rs:
        rs.append([b"abc", bytearray(b"de"), np.frombuffer(b"xyz!", np.uint8)])
        assert [r.tobytes() for r in rs[:]] == [b"abc", b"de", b"xyz!"]
        assert rs[1].shape == (2,)
    with RaggedStore("i", np.int32) as rs:
        with pytest.raises(ValueError):
            rs.append([b"abcd"])


def test_append_validation():
    with RaggedStore("r", np.int32) as rs:
        with pytest.raises(ValueError):
            rs.append([np.zeros(0, np.int32)])
        with pytest.raises(ValueError):
            rs.append([np.zeros((3, 0), np.int32)])
        with pytest.raises(ValueError):
            rs.append([])
        with pytest.raises(ValueError):
            rs.append([np.zeros(3, np.int64)])
        with pytest.raises(ValueError):
            rs.append([np.zeros(3, np.int32), np.zeros(2, np.float32)])
        assert len(rs) == 0
        with pytest.raises(ZrecordError):
            rs[0]
    with pytest.raises(FileNotFoundError):
        RaggedStore("nothing")
    with pytest.raises(ValueError):
        RaggedStore("o", object)


def test_structured_and_non_native_order():
    dt = structured_dtype()
    recs = [np.zeros(n, dt) for n in (1, 3, 2)]
    for i, r in enumerate(recs):
        r["id"] = np.arange(len(r)) + 10 * i
    with RaggedStore("s", dt) as rs:
        rs.append(recs)
    with RaggedStore("s") as rs:
        assert rs.dtype == dt
        for g, w in zip(rs[:], recs):
            assert g.dtype == dt and g.tobytes() == w.tobytes()
    big = [np.arange(n, dtype=">f8").reshape(-1, 1) for n in (2, 5)]
    with RaggedStore("be", ">f8") as rs:
        rs.append(big)
        got = rs[:]
        assert got[1].dtype.str == ">f8" and got[1].shape == (5, 1)
        np.testing.assert_array_equal(got[1], big[1])


def test_delete_compact_stats():
    rng = np.random.default_rng(3)
    recs = records(rng, 40, np.float64)
    with RaggedStore("r", np.float64) as rs:
        rs.append(recs)
        s0 = rs.stats()
        assert s0["records"] == 40
        rs.delete(np.arange(0, 40, 2))
        assert len(rs) == 20 and rs.stats()["records"] == 20
        want = sorted(r.tobytes() for r in recs[1::2])
        assert sorted(r.tobytes() for r in rs[:]) == want
        rs.compact()
        assert rs.stats()["chunk_bytes"] < s0["chunk_bytes"]
        assert sorted(r.tobytes() for r in rs[:]) == want
    with RaggedStore("r") as rs:
        assert sorted(r.tobytes() for r in rs[:]) == want


def test_kind_mismatch():
    with RaggedStore("r", np.int32) as rs:
        rs.append([np.arange(3, dtype=np.int32)])
    with pytest.raises(ValueError):
        DenseStore("r")


@ours_only
def test_ragged_read_only_and_busy():
    from loaderx.zrecord import StoreBusy
    with RaggedStore("r", np.int32) as rs:
        rs.append([np.arange(3, dtype=np.int32)])
        with pytest.raises(StoreBusy):
            RaggedStore("r")
    with RaggedStore("r", read_only=True) as ro:
        np.testing.assert_array_equal(ro[0], [0, 1, 2])
        with pytest.raises(PermissionError):
            ro.append([np.arange(3, dtype=np.int32)])


def test_gathered_records_outlive_the_batch_and_store():
    # Each record is a view into one packed buffer made by the native
    # gather: it must stay valid (and writeable, like the reference's) after
    # the list, the other records and the store are gone, and two gathers
    # must never share memory.
    rng = np.random.default_rng(5)
    recs = records(rng, 40, np.float64)
    with RaggedStore("r", np.float64, codec="zstd") as rs:
        rs.append(recs)
        keep = rs[[3, 7, 7, 38]][2]
        again = rs[[7]][0]
    import gc
    gc.collect()
    np.testing.assert_array_equal(keep, recs[7])
    assert keep.flags.writeable and keep.flags.c_contiguous
    keep[...] = -1
    np.testing.assert_array_equal(again, recs[7])
    assert not np.shares_memory(keep, again)


@ours_only
@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_a_gathered_list_views_one_buffer_without_a_copy(codec):
    # The records of one gather are views into the buffer the native gather
    # filled, handed to NumPy as is: one base for all, the first payload
    # 64-byte aligned (where the gather put it), each view where the packed
    # layout says, and distinct gathers in distinct buffers.
    rng = np.random.default_rng(9)
    recs = records(rng, 30, np.int32)
    with RaggedStore("r", np.int32, codec=codec) as rs:
        rs.append(recs)
        got = rs[[4, 0, 29, 4]]
        other = rs[[4]]
    bases = {id(g.base) for g in got}
    assert len(bases) == 1 and got[0].base is not None
    addr = [g.__array_interface__["data"][0] for g in got]
    assert addr[0] % 64 == 0
    for k in range(1, len(got)):
        assert addr[k] == addr[k - 1] + got[k - 1].nbytes
    for g, i in zip(got, [4, 0, 29, 4]):
        np.testing.assert_array_equal(g, recs[i])
    assert other[0].base is not got[0].base


@ours_only
@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_gather_packed_concatenates_records_with_offsets_and_shapes(codec):
    rng = np.random.default_rng(5)
    recs = [rng.integers(-9, 9, rng.integers(1, 40), dtype=np.int32) for _ in range(50)]
    recs += [np.int32(7), np.arange(24, dtype=np.int32).reshape(2, 3, 4)]  # rank 0 and 3
    with RaggedStore("r", np.int32, codec=codec) as rs:
        rs.append(recs)
        for idx in ([50, 3, 51, 3], slice(None, None, -7), np.arange(52) % 2 == 0, -1, []):
            values, offsets, shapes = rs.gather_packed(idx)
            want = rs[idx] if not isinstance(idx, int) else [rs[idx]]
            assert values.dtype == np.int32 and values.ndim == 1
            assert offsets.dtype == np.int64 and len(offsets) == len(want) + 1
            assert offsets[0] == 0 and offsets[-1] == len(values)
            assert shapes == [w.shape for w in want]
            for k, w in enumerate(want):
                np.testing.assert_array_equal(
                    values[offsets[k]:offsets[k + 1]].reshape(shapes[k]), w)
        with pytest.raises(IndexError):
            rs.gather_packed([52])


@ours_only
def test_gather_packed_structured_and_bytes_records():
    dt = structured_dtype()
    recs = [np.zeros(n, dt) for n in (1, 3, 2)]
    for k, r in enumerate(recs):
        r["x"] = k
        r["inner"]["b"] = -k
    with RaggedStore("s", dt) as rs:
        rs.append(recs)
        values, offsets, shapes = rs.gather_packed([2, 0])
        assert values.dtype == dt and list(offsets) == [0, 2, 3] and shapes == [(2,), (1,)]
        assert values.tobytes() == recs[2].tobytes() + recs[0].tobytes()
    with RaggedStore("b", np.uint8) as rs:
        rs.append([b"hello", b"", b"!"] [::2])
        values, offsets, _ = rs.gather_packed([0, 1])
        assert values.tobytes() == b"hello!" and list(offsets) == [0, 5, 6]


def _same_record(got, want):
    """Record equality field by field (a padded dtype's filler bytes are
    not data: a copy of a non-contiguous record need not keep them)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype.names:
        for f in got.dtype.names:
            _same_record(got[f], want[f])
    else:
        assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes()


def test_non_contiguous_records_and_every_index_form():
    # Records given as views (Fortran order, negative and 2-step strides,
    # a 0-d slice of a structured array) are stored in C order with their
    # shapes; every index form reads the same bytes back.
    base = np.arange(60, dtype=">i4").reshape(5, 12)
    recs = [base[:, ::2], base[::-1, 3], np.asfortranarray(base[:3, :4]),
            base[2:3, 5].reshape(()), base[1:2, ::-5], base.T[::3]]
    with RaggedStore("r", ">i4") as rs:
        rs.append(recs)
        n = len(recs)
        forms = {
            "np int scalar": (np.uint8(2), [2]),
            "negative": (-1, [n - 1]),
            "step slice": (slice(None, None, -2), list(range(n))[::-2]),
            "offset step": (slice(1, None, 3), [1, 4]),
            "int8 array": (np.array([0, -1, 3], np.int8), [0, n - 1, 3]),
            "uint16 array": (np.array([5, 0], np.uint16), [5, 0]),
            "big-endian array": (np.array([4, 1], ">i8"), [4, 1]),
            "strided array": (np.arange(12)[::-4] % n, [5, 1, 3]),
            "bool mask": (np.arange(n) % 2 == 1, [1, 3, 5]),
            "list with numpy ints": ([np.int64(3), 2], [3, 2]),
            "tuple": ((0, 5, 0), [0, 5, 0]),
        }
        for name, (idx, want) in forms.items():
            got = [rs[idx]] if isinstance(idx, (int, np.integer)) else rs[idx]
            assert len(got) == len(want), name
            for g, k in zip(got, want):
                assert g.flags.c_contiguous and g.flags.aligned, name
                _same_record(g, recs[k])


@pytest.mark.parametrize("dtype", [np.int32, np.float16, np.complex64, np.bool_, ">i4", "<u2", "struct"])
def test_a_batch_mixing_plain_arrays_with_views_scalars_and_memoryviews_reads_back_exactly(dtype):
    # Plain C-contiguous arrays take a short path and the other forms the
    # general one; in one batch their bytes and shapes must come back as
    # given, whatever the dtype's byte order or structure.
    dt = structured_dtype() if dtype == "struct" else np.dtype(dtype)
    raw = np.random.default_rng(5).integers(0, 256, size=40 * 4 * dt.itemsize, dtype=np.uint8)
    base = raw.view(dt)[:40 * 4].reshape(40, 4) if dt.kind != "b" else (raw[:160] % 2).astype(bool).reshape(40, 4)
    recs = [base[0], base[1:3].copy(), base[:, 1], base[5:6, 2].reshape(()), np.ascontiguousarray(base[7:9].T),
            base[10:14][::-1], base[20].copy()[None, None], memoryview(np.ascontiguousarray(base[30]))]
    if dt.kind != "V" and dt.isnative:
        recs.append(base[31, 0])  # a NumPy scalar (always of native order)
    with RaggedStore("mix", dt) as rs:
        rs.append(recs)
        got = rs[:]
    assert len(got) == len(recs)
    for g, r in zip(got, recs):
        want = np.asarray(r)
        assert g.dtype == dt and g.shape == want.shape
        assert g.tobytes() == np.ascontiguousarray(want).tobytes()


def test_a_batch_with_a_record_of_another_dtype_appends_nothing():
    with RaggedStore("r", np.float32) as rs:
        with pytest.raises(ValueError):
            rs.append([np.ones(2, np.float32), np.ones(2, np.float64)])
        with pytest.raises(ValueError):
            rs.append([np.ones(2, np.float32), np.ones(2, ">f4")])
        assert len(rs) == 0
        assert rs.append([np.ones(2, np.float32), np.float32(3)]) == 0
        assert [r.shape for r in rs[:]] == [(2,), ()]


def test_very_many_tiny_records():
    vals = np.arange(30_000, dtype=np.uint32) * 2654435761 % 251
    with RaggedStore("t", np.uint8) as rs:
        assert rs.append(v.astype(np.uint8) for v in vals) == 0
        assert rs.append([b"x"] * 1000) == 30_000
        assert len(rs) == 31_000
        got = rs[::7]
        assert all(g.shape == () for g in got[:-143])
        np.testing.assert_array_equal([int(g) for g in got[:-143]], vals[::7][:len(got) - 143])
        assert [g.tobytes() for g in rs[-3:]] == [b"x"] * 3
        idx = np.random.default_rng(1).integers(-31_000, 30_000, 5000)
        every = np.concatenate([vals, np.full(1000, ord("x"))])
        np.testing.assert_array_equal([int(g[0] if g.ndim else g) for g in rs[idx]], every[idx])


@ours_only
@pytest.mark.parametrize("dtype", [
    np.dtype("u1"), np.dtype(">i2"), np.dtype("<c16"), np.dtype("?"),
    np.dtype([("a", "u1"), ("b", ">f8")]),
    np.dtype([("a", "u1"), ("b", "<i4")], align=True),
])
def test_gather_and_gather_packed_read_every_record_exactly(dtype):
    # The native gather hands a batch's buffer, where the payloads start
    # 64-byte aligned, to NumPy: every record, every
    # index form, both the list of views and the packed form, must be the
    # bytes appended, at offsets counted from the payloads' start.
    rng = np.random.default_rng(dtype.itemsize)
    recs = []
    for k in range(700):
        shape = tuple(int(d) for d in rng.integers(1, 5, size=k % 4))
        raw = rng.integers(0, 256, math.prod(shape) * dtype.itemsize, dtype=np.uint8)
        recs.append(raw.view(dtype).reshape(shape))
    with RaggedStore("p", dtype, codec="zstd") as rs:
        for lo in range(0, 700, 97):
            rs.append(recs[lo:lo + 97])
        for idx in (slice(None), slice(None, None, -3), 17, np.int8(-5),
                    rng.integers(-700, 700, 3000), rng.random(700) < .1, [699, 0, 699]):
            want = [int(idx) % 700] if isinstance(idx, (int, np.integer)) else \
                np.arange(700)[idx].tolist()
            got = [rs[idx]] if isinstance(idx, (int, np.integer)) else rs[idx]
            values, offsets, shapes = rs.gather_packed(idx)
            # A view of the gathered buffer (no copy), which it keeps alive.
            assert values.dtype == dtype and values.flags.c_contiguous and values.flags.writeable
            assert type(values.base).__name__ == "RaggedBuffer" and len(values.base) >= values.nbytes
            assert offsets[0] == 0 and offsets[-1] == len(values) and len(offsets) == len(want) + 1
            assert shapes == [recs[k].shape for k in want]
            for j, (g, k) in enumerate(zip(got, want)):
                assert g.flags.aligned
                _same_record(g, recs[k])
                _same_record(values[offsets[j]:offsets[j + 1]].reshape(shapes[j]), recs[k])


@ours_only
def test_a_small_gather_does_not_pin_a_recycled_big_buffer():
    # Gathers fill a buffer recycled from an earlier batch. A small batch
    # kept alive (a label cached per step, say) must not hold on to a
    # buffer many times its size: that would make memory grow by the big
    # batch's size per kept record.
    big = [np.full(50_000, k, np.int32) for k in range(8)]  # 1.6 MB a batch
    with RaggedStore("pin", np.int32, codec="raw") as rs:
        rs.append(big + [np.array([7, 8], np.int32)])
        kept = []
        for _ in range(4):
            for packed in (False, True):
                batch = rs.gather_packed(range(8)) if packed else rs[range(8)]
                del batch  # its buffer goes back to the pool
                small = rs.gather_packed([8])[0] if packed else rs[[8]][0]
                np.testing.assert_array_equal(small, [7, 8])
                assert small.flags.aligned and small.flags.writeable
                assert len(small.base) <= 4 * small.nbytes + 8192, len(small.base)
                kept.append(small)
        # The big buffers are still recycled, and the kept views unchanged.
        for got, k in zip(rs[range(8)], range(8)):
            np.testing.assert_array_equal(got, big[k])
        for small in kept:
            np.testing.assert_array_equal(small, [7, 8])


@ours_only
def test_verify_names_damaged_records_by_logical_index():
    from test_dense import _garble
    rng = np.random.default_rng(5)
    recs = [np.arange(int(n), dtype=np.int64) % 5 for n in rng.integers(20, 60, 12)]
    with RaggedStore("rv", np.int64, codec="zstd") as rs:
        rs.append(recs)
        rep = rs.verify()
        assert rep["ok"] and rep["records"] == 12 and rep["bad"] == []
        assert rep["decoded_bytes"] >= sum(r.nbytes for r in recs)
    _garble("rv", [2 * 7])  # record 7's payload
    with RaggedStore("rv", read_only=True) as rs:
        rep = rs.verify()
        assert not rep["ok"]
        assert {i for i, _ in rep["bad"]} == {7}, rep
        assert any(what.startswith("payload") for _, what in rep["bad"]), rep
