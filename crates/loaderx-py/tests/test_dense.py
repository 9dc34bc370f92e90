"""DenseStore public behaviour: creation/open, append, every index form,
maintenance, lifecycle. Guards the drop-in claim for the dense contract."""

import os

import numpy as np
import pytest

from loaderx.zrecord import DenseStore, RaggedStore, ZrecordError

from conftest import ours_only, structured_dtype

CODECS = ["raw", "zstd"]


@pytest.mark.parametrize("codec", CODECS)
def test_roundtrip_and_index_forms(codec):
    data = np.arange(64, dtype=np.float32).reshape(8, 2, 4)
    with DenseStore("data", data.dtype, data.shape[1:], codec=codec) as ds:
        assert ds.append(data) == 0
        assert ds.append(data[:3]) == 8
    ds = DenseStore("data")
    assert len(ds) == 11 and ds.codec == codec
    assert ds.dtype == np.float32 and ds.item_shape == (2, 4)
    full = np.concatenate([data, data[:3]])
    np.testing.assert_array_equal(ds[0, 5, 2], full[[0, 5, 2]])
    assert ds[0, 5, 2].shape == (3, 2, 4)
    np.testing.assert_array_equal(ds[3], full[3])
    assert ds[3].shape == (2, 4)
    np.testing.assert_array_equal(ds[-1], full[-1])
    np.testing.assert_array_equal(ds[np.int64(4)], full[4])
    np.testing.assert_array_equal(ds[2:9:3], full[2:9:3])
    np.testing.assert_array_equal(ds[::-1], full[::-1])
    np.testing.assert_array_equal(ds[[-1, -11, 0]], full[[-1, -11, 0]])
    np.testing.assert_array_equal(ds[np.array([7, 7, 1], dtype=np.uint32)], full[[7, 7, 1]])
    mask = np.arange(11) % 3 == 0
    np.testing.assert_array_equal(ds[mask], full[mask])
    np.testing.assert_array_equal(ds.__getitems__([4, 1]), full[[4, 1]])
    assert ds[[]].shape == (0, 2, 4)
    assert ds[5:2].shape == (0, 2, 4)
    out = ds[0, 1]
    assert out.flags.c_contiguous and out.flags.writeable and out.flags.owndata
    ds.close()


def test_scalar_records_and_1d_labels():
    labels = np.arange(10, dtype=np.int64) * 7
    with DenseStore("label", labels.dtype, labels.shape[1:]) as ds:
        ds.append(labels)
        assert ds.item_shape == ()
        assert ds[3] == 21
        assert ds[[1, 2]].shape == (2,)


@pytest.mark.parametrize("dtype", ["<f2", ">f4", "<c16", "|b1", ">i8", "<u2", "|i1"])
def test_dtype_identity_roundtrips(dtype):
    rng = np.random.default_rng(0)
    data = rng.integers(0, 2, size=(5, 3)).astype(dtype)
    with DenseStore("d", data.dtype, (3,)) as ds:
        ds.append(data)
    with DenseStore("d") as ds:
        assert ds.dtype == np.dtype(dtype) and ds.dtype.str == np.dtype(dtype).str
        got = ds[:]
        assert got.dtype.str == np.dtype(dtype).str
        np.testing.assert_array_equal(got, data)


def test_structured_dtype_roundtrips():
    dt = structured_dtype()
    data = np.zeros(6, dtype=dt)
    data["x"] = np.arange(6)
    data["id"] = np.arange(6) * 1000
    data["pos"] = np.arange(18).reshape(6, 3)
    data["inner"]["b"] = 0.5
    with DenseStore("s", dt, ()) as ds:
        ds.append(data)
    with DenseStore("s") as ds:
        assert ds.dtype == dt and ds.dtype.descr == dt.descr
        got = ds[[5, 0]]
        assert got.tobytes() == data[[5, 0]].tobytes()


@ours_only
def test_padded_structured_dtype_reopens_equal_to_itself():
    # align=True inserts padding, which descr lists as ('', '|V7'); reopened,
    # it must be the same dtype (offsets), not one with a padding field
    # (loaderx 1.7.2 gives one back, named 'f1', and then refuses `dt`).
    dt = np.dtype([("a", "u1"), ("b", "<f8")], align=True)
    data = np.zeros(3, dt)
    data["a"], data["b"] = [1, 2, 3], [0.5, 1.5, 2.5]
    with DenseStore("pad", dt, ()) as ds:
        ds.append(data)
    with DenseStore("pad") as ds:
        assert ds.dtype == dt and ds.dtype.names == ("a", "b")
        assert ds[:].tolist() == data.tolist()
    with DenseStore("pad", dt) as ds:
        assert len(ds) == 3


PADDED = np.dtype([("a", "u1"), ("b", "<i8"), ("c", "<f4"),
                   ("inner", [("x", "u1"), ("y", "<i4")], (2,))], align=True)


def _padding_mask(dt):
    """True at the bytes of a `dt` item that no field covers."""
    pad = np.ones(dt.itemsize, bool)

    def cover(d, at):
        if d.subdtype is not None:
            base, shape = d.subdtype
            for k in range(int(np.prod(shape))):
                cover(base, at + k * base.itemsize)
        elif d.names is not None:
            for name in d.names:
                cover(d.fields[name][0], at + d.fields[name][1])
        else:
            pad[at:at + d.itemsize] = False

    cover(dt, 0)
    return pad


@ours_only
@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_padding_of_a_non_contiguous_structured_append_is_zeroed(kind):
    """Regression: a padded structured record appended from a
    non-contiguous view was copied to C order field by field by NumPy,
    leaving the padding bytes as the allocator gave them, and those
    reached the store's files (so did loaderx 1.7.2's); they are zeros now.
    The allocator is first handed blocks of 0xAB, so stale bytes show."""
    dt = PADDED
    pad = _padding_mask(dt)
    assert pad.any() and not pad.all()
    src = np.zeros(16, dt)
    for name in ("a", "b", "c"):
        src[name] = np.arange(16) + 1
    src["inner"]["x"], src["inner"]["y"] = 7, -3
    view = src[::2]  # 8 records, not contiguous
    for _ in range(50):  # stale bytes in the freed blocks NumPy reuses
        np.full(8 * dt.itemsize, 0xAB, np.uint8)
    if kind == "dense":
        with DenseStore("s", dt, ()) as s:
            s.append(view)
            got = s[:]
    else:
        with RaggedStore("s", dt) as s:
            s.append([view, src.reshape(4, 4)[:, ::2]])
            # Raw bytes: concatenating the arrays would copy field by field.
            got = np.frombuffer(b"".join(r.tobytes() for r in s[:]), dtype=dt)
    for name in ("a", "b", "c"):
        np.testing.assert_array_equal(got[name][:8], view[name])
    np.testing.assert_array_equal(got["inner"]["y"][:8], view["inner"]["y"])
    items = got.view(np.uint8).reshape(len(got), dt.itemsize)
    assert not items[:, pad].any(), items[:, pad]


@ours_only
def test_padding_detection_matches_a_byte_map():
    """`_has_padding` against the byte-by-byte map above, on padded and
    unpadded layouts (nested, offset-spaced, unions, subarrays of structs).
    It now asks a subarray's element once instead of walking every element
    (a subarray of a million structs took about a second)."""
    from loaderx.zrecord import _has_padding
    packed = np.dtype([("a", "u1"), ("b", "<i4")])
    aligned = np.dtype([("a", "u1"), ("b", "<i4")], align=True)
    cases = [
        np.dtype("f4"), packed, aligned, PADDED,
        np.dtype([("p", aligned), ("q", "<f2")]),
        np.dtype({"names": ["a", "b"], "formats": ["u1", "u1"], "offsets": [0, 2], "itemsize": 3}),
        np.dtype({"names": ["a"], "formats": ["u1"], "offsets": [0], "itemsize": 4}),
        np.dtype({"names": ["a", "b"], "formats": ["<u4", "u1"], "offsets": [0, 0], "itemsize": 4}),
        np.dtype([("s", packed, (3,))]), np.dtype([("s", aligned, (3,))]),
        np.dtype([("s", "<f4", (4,)), ("t", "u1")]),
        np.dtype([("s", np.dtype([("t", aligned, (2,))]), (2,))]),
    ]
    for dt in cases:
        assert _has_padding(dt) == bool(_padding_mask(dt).any()), dt
    # Element by element, this one took about a second (no timing asserted).
    assert not _has_padding(np.dtype([("s", packed, (1_000_000,))]))
    assert _has_padding(np.dtype([("s", aligned, (1_000_000,))]))


def test_open_validates_explicit_arguments():
    with DenseStore("d", np.uint8, (4,), codec="raw") as ds:
        ds.append(np.zeros((2, 4), np.uint8))
    with DenseStore("d", np.uint8, (4,), codec="raw") as ds:
        assert len(ds) == 2
    with pytest.raises(ValueError):
        DenseStore("d", np.float32)
    with pytest.raises(ValueError):
        DenseStore("d", item_shape=(5,))
    with pytest.raises(ValueError):
        DenseStore("d", codec="zstd")
    with pytest.raises(ValueError):
        RaggedStore("d")
    with pytest.raises(ValueError):
        DenseStore("d", dict_bytes=b"abc")
    # every failed open released the store
    with DenseStore("d") as ds:
        assert len(ds) == 2


def test_create_errors():
    with pytest.raises(FileNotFoundError):
        DenseStore("missing")
    with pytest.raises(FileNotFoundError):
        DenseStore("missing", np.float32)  # dense needs item_shape too
    with pytest.raises(ValueError):
        DenseStore("z", np.uint8, (4,), codec="zstd_dict")
    with pytest.raises(ValueError):
        DenseStore("z", np.uint8, (4,), codec="zstd", dict_bytes=b"x")
    with pytest.raises(KeyError):
        DenseStore("z", np.uint8, (4,), codec="lz4")
    with pytest.raises(ValueError):
        DenseStore("z", np.uint8, (0,))
    with pytest.raises(ValueError):
        DenseStore("z", np.uint8, (-1,))
    with pytest.raises(ValueError):
        DenseStore("z", object, (1,))


def test_append_validation():
    with DenseStore("d", np.float32, (2, 4)) as ds:
        with pytest.raises(ValueError):
            ds.append(np.zeros((3, 2, 4), np.float64))
        with pytest.raises(ValueError):
            ds.append(np.zeros((3, 8), np.float32))
        with pytest.raises(ValueError):
            ds.append(np.zeros((0, 2, 4), np.float32))
        with pytest.raises(ValueError):
            ds.append(np.float32(1))
        # a non-contiguous source is fine
        src = np.arange(32, dtype=np.float32).reshape(2, 2, 8)[:, :, ::2]
        assert not src.flags.c_contiguous
        ds.append(src)
        np.testing.assert_array_equal(ds[:], src)
        assert len(ds) == 2


def test_out_of_range_is_zrecord_error():
    with DenseStore("d", np.uint8, (1,)) as ds:
        ds.append(np.zeros((3, 1), np.uint8))
        for bad in (3, [3], [0, 5], [-4]):
            with pytest.raises(ZrecordError):
                ds[bad]
        with pytest.raises(ZrecordError):
            ds.delete([7])
        assert len(ds) == 3


@ours_only
def test_out_of_range_is_also_index_error():
    from loaderx.zrecord import IndexOutOfRange
    with DenseStore("d", np.uint8, (1,)) as ds:
        ds.append(np.zeros((3, 1), np.uint8))
        for bad in (3, -4, [3], np.array([-4])):
            with pytest.raises(IndexError) as info:
                ds[bad]
            assert isinstance(info.value, IndexOutOfRange)
            assert info.value.code == -3
        with pytest.raises(IndexError):
            ds[np.array([True, False])]  # mask length must match
        with pytest.raises(IndexError):
            ds[[0.5]]


@pytest.mark.parametrize("codec", CODECS)
def test_delete_compact_stats(codec):
    data = np.arange(100 * 16, dtype=np.int32).reshape(100, 16)
    with DenseStore("d", data.dtype, (16,), codec=codec) as ds:
        ds.append(data)
        before = ds.stats()
        assert set(before) == {"records", "live_bytes", "chunk_bytes", "reclaimable"}
        assert before["records"] == 100 and before["reclaimable"] == 0
        ds.delete(np.arange(0, len(ds), 2))
        assert len(ds) == 50
        survivors = {tuple(r) for r in ds[:]}
        assert survivors == {tuple(r) for r in data[1::2]}
        mid = ds.stats()
        assert mid["records"] == 50 and mid["reclaimable"] > 0
        assert mid["chunk_bytes"] == before["chunk_bytes"]
        ds.compact()
        after = ds.stats()
        assert after["records"] == 50
        assert after["chunk_bytes"] < before["chunk_bytes"]
        assert {tuple(r) for r in ds[:]} == survivors
        ds.delete(-1)
        ds.delete(slice(0, 2))
        ds.delete(np.ones(len(ds), bool) & (np.arange(len(ds)) == 3))
        assert len(ds) == 46
        ds.delete([])
        assert len(ds) == 46
        ds.sync()
        assert ds.has_dict() is False
    with DenseStore("d") as ds:
        assert len(ds) == 46


def test_second_handle_is_busy_and_close_releases():
    ds = DenseStore("d", np.uint8, (2,))
    with pytest.raises(ZrecordError) as info:
        DenseStore("d")
    assert info.value.code == -14
    ds.close()
    ds.close()  # idempotent
    with DenseStore("d") as again:
        assert len(again) == 0


@ours_only
def test_busy_subclass_and_closed_store():
    from loaderx.zrecord import StoreBusy, StoreClosed
    ds = DenseStore("d", np.uint8, (2,))
    with pytest.raises(StoreBusy):
        DenseStore("d")
    ds.close()
    with pytest.raises(StoreClosed):
        len(ds)
    with pytest.raises(StoreClosed):
        ds[0]
    with pytest.raises(ValueError):
        ds.append(np.zeros((1, 2), np.uint8))


@ours_only
def test_read_only_open():
    from loaderx.zrecord import ReadOnlyStore
    data = np.arange(12, dtype=np.int16).reshape(6, 2)
    with DenseStore("d", data.dtype, (2,)) as ds:
        ds.append(data)
    with pytest.raises(FileNotFoundError):
        DenseStore("nothing", np.int16, (2,), read_only=True)
    ro = DenseStore("d", read_only=True)
    ro2 = DenseStore("d", read_only=True)
    np.testing.assert_array_equal(ro[[5, 0]], data[[5, 0]])
    np.testing.assert_array_equal(ro2[:], data)
    with pytest.raises(PermissionError) as info:
        ro.append(data)
    assert isinstance(info.value, ReadOnlyStore)
    with pytest.raises(PermissionError):
        ro.delete([0])
    assert len(ro) == 6
    ro.close()
    ro2.close()


@ours_only
@pytest.mark.parametrize("level", [1, 19])
def test_compression_level_is_a_creation_argument(level):
    data = np.tile(np.arange(256, dtype=np.uint8), (32, 4))
    with DenseStore("d", np.uint8, (1024,), codec="zstd", level=level) as ds:
        ds.append(data)
        np.testing.assert_array_equal(ds[:], data)
    with DenseStore("d") as ds:
        np.testing.assert_array_equal(ds[::-1], data[::-1])


@ours_only
@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_a_level_given_at_reopen_applies_to_that_handles_appends(kind):
    from loaderx.zrecord import ReadOnlyStore
    rng = np.random.default_rng(3)
    words = [bytes(rng.integers(97, 123, size=rng.integers(2, 9))) for _ in range(300)]
    text = b" ".join(words[i] for i in rng.integers(0, 300, size=12000))[:65536]
    rec = np.frombuffer(text, dtype=np.uint8)

    def store(**kw):
        if kind == "dense":
            return DenseStore("t", np.uint8, (len(rec),), **kw)
        return RaggedStore("t", np.uint8, **kw)

    def add(s):
        s.append(rec[None] if kind == "dense" else [rec])
        return s.stats()["live_bytes"]

    with store(codec="zstd", level=1) as s:
        fast = add(s)
    with store(level=19) as s:
        slow = add(s) - fast
    with store() as s:
        default = add(s) - fast - slow
        got = s[[0, 1, 2]]
    # Ragged stores also hold a small shape record per record.
    assert slow < default < fast, (slow, default, fast)
    for g in got:
        np.testing.assert_array_equal(np.asarray(g).reshape(-1), rec)
    # The message says why (it used to say only "open read-only").
    with pytest.raises(ReadOnlyStore, match=r"level=3 sets the zstd level of appends"):
        store(read_only=True, level=3)
    with pytest.raises(ValueError, match="raw"):
        DenseStore("r", np.uint8, (4,), codec="raw", level=3)


@ours_only
@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_a_bad_level_is_refused_by_name_before_anything_changes(kind):
    import math

    def store(path, **kw):
        if kind == "dense":
            return DenseStore(path, np.uint8, (4,), **kw)
        return RaggedStore(path, np.uint8, **kw)

    with store("s") as s:
        s.append(np.zeros((2, 4), np.uint8) if kind == "dense" else [np.zeros(4, np.uint8)] * 2)
    # Out of a C int, these leaked PyO3's OverflowError ("Python int too
    # large to convert to C long"), and floats, strings and NumPy bools its
    # TypeError, neither naming level; True was taken as level 1.
    for bad, exc in [(2**31, ValueError), (-2**31 - 1, ValueError), (2**63, ValueError),
                     (10**400, ValueError), (2.0, TypeError), (math.inf, TypeError),
                     (math.nan, TypeError), ("3", TypeError), (True, TypeError),
                     (np.bool_(True), TypeError), (np.float32(3), TypeError)]:
        with pytest.raises(exc, match="level"):
            store("n", level=bad)
        assert not os.path.exists("n")
        with pytest.raises(exc, match="level"):
            store("s", level=bad)
    # Integers of any kind still set it.
    for good in (np.int8(3), np.uint64(5), -5):
        with store("s", level=good) as s:
            assert len(s) == 2


def test_large_records_and_batches():
    rng = np.random.default_rng(1)
    data = rng.integers(0, 255, size=(40, 64, 1024), dtype=np.uint8)
    for codec in CODECS:
        with DenseStore(f"big_{codec}", np.uint8, (64, 1024), codec=codec) as ds:
            ds.append(data)
            idx = rng.integers(0, 40, size=100)
            np.testing.assert_array_equal(ds[idx], data[idx])


def test_index_forms_the_reference_also_accepts():
    # Shared with loaderx 1.7.2: whole-number floats and object arrays of
    # integers (pandas) index like integers; a falsy codec is the default;
    # a reopen coerces item_shape with int().
    data = np.arange(10, dtype=np.int32)
    with DenseStore("f", np.int32, (), codec="") as ds:
        assert ds.codec == "zstd"
        ds.append(data)
    with DenseStore("f", item_shape=(), codec=None) as ds:
        np.testing.assert_array_equal(ds[np.array([1.0, 2.0])], [1, 2])
        np.testing.assert_array_equal(ds[3.0], [3])
        np.testing.assert_array_equal(ds[np.array([4, -1], dtype=object)], [4, 9])
        ds.delete([1.0])
        assert len(ds) == 9
    with DenseStore("m", np.uint8, (2, 3)) as ds:
        ds.append(np.zeros((1, 2, 3), np.uint8))
    with DenseStore("m", item_shape=(2.0, 3.0)) as ds:
        assert ds.item_shape == (2, 3)


@ours_only
def test_index_values_that_are_not_whole_numbers_are_refused():
    from loaderx.zrecord import IndexOutOfRange
    with DenseStore("g", np.int32, ()) as ds:
        ds.append(np.arange(10, dtype=np.int32))
        for bad in (np.array([1.5]), np.array([np.nan]), np.array([np.inf]),
                    np.array([1, "a"], dtype=object), np.array([True, 1], dtype=object)):
            with pytest.raises(IndexError, match="record index"):
                ds[bad]
        with pytest.raises(IndexOutOfRange):
            ds[np.array([2**70], dtype=object)]
        assert len(ds) == 10


def test_empty_dictionary_is_a_dictionary_error():
    from loaderx.zrecord import ZrecordError
    with pytest.raises(ZrecordError):
        DenseStore("e", np.uint8, (4,), codec="zstd_dict", dict_bytes=b"")


@ours_only
@pytest.mark.parametrize("codec", ["raw", "zstd"])
@pytest.mark.parametrize("dtype,shape", [
    ("<f4", (3, 4)),
    (">i8", (2,)),
    ("<u2", ()),
    ("|b1", (5,)),
    ("<c16", (2, 1, 2)),
    ([("a", "<i4"), ("b", ">f8", (2,))], (3,)),
    ([("a", "<i4"), ("b", ">f8", (2,))], ()),
    ("|u1", (300, 1024)),  # over POOL_MIN_BYTES: the pooled path
])
def test_one_record_read_equals_a_batch_of_one(tmp_path, codec, dtype, shape):
    """``ds[i]`` (the one-record path) gives what ``ds[[i]][0]`` gives: same
    values, dtype, shape, and a NumPy scalar for scalar records."""
    from loaderx.zrecord import IndexOutOfRange
    dt = np.dtype(dtype)
    n = 50
    raw = np.random.default_rng(3).integers(0, 256, (n * dt.itemsize * max(1, int(np.prod(shape))),),
                                             dtype=np.uint8)
    data = raw.view(dt).reshape((n, *shape))
    with DenseStore(tmp_path / "s", dt, shape, codec) as s:
        s.append(data)
    s = DenseStore(tmp_path / "s", read_only=True)
    for i in [0, 7, n - 1, -1, -n, np.int64(3), np.uint8(4)]:
        one, batch = s[i], s[[int(i)]][0]
        assert type(one) is type(batch)
        assert one.dtype == batch.dtype == dt
        assert np.shape(one) == shape
        as_bytes = lambda x: np.asarray(x).reshape(-1).view(np.uint8)  # noqa: E731
        np.testing.assert_array_equal(as_bytes(one), as_bytes(data[int(i)]))
    for bad in (n, -n - 1):
        with pytest.raises(IndexOutOfRange, match=f"index {bad} is out of range for {n}"):
            s[bad]
    s.close()


@ours_only
def test_index_arrays_of_every_integer_kind(tmp_path):
    """Index arrays of any integer width, byte order or stride name the same
    records, negatives wrap, and nothing out of range wraps into range."""
    from loaderx.zrecord import IndexOutOfRange
    n = 200
    data = np.arange(n, dtype=np.int32)
    with DenseStore(tmp_path / "s", np.int32, ()) as s:
        s.append(data)
    s = DenseStore(tmp_path / "s", read_only=True)
    want = [199, 0, 5, 150]
    for dt in ("<i1", "<i2", ">i4", "<i8", ">i8"):
        idx = np.array([-1, 0, 5, -50], dtype=dt)
        np.testing.assert_array_equal(s[idx], data[want])
    for dt in ("<u1", "<u2", ">u4", "<u8", ">u8"):
        idx = np.array([199, 0, 5, 150], dtype=dt)
        np.testing.assert_array_equal(s[idx], data[want])
    strided = np.array([199, 1, 0, 1, 5, 1, 150], dtype=np.int64)[::2]
    np.testing.assert_array_equal(s[strided], data[want])
    np.testing.assert_array_equal(s[np.array([[1, 2], [3, -1]])], data[[1, 2, 3, 199]])
    # 2^64 - 1 as uint64 (either byte order) is far out of range, not -1.
    for dt in ("<u8", ">u8"):
        with pytest.raises(IndexOutOfRange, match=f"index {2**64 - 1} is out of range for {n}"):
            s[np.array([3, 2**64 - 1], dtype=dt)]
    with pytest.raises(IndexOutOfRange, match=f"index -201 is out of range for {n}"):
        s[np.array([-201, 500])]
    with pytest.raises(IndexOutOfRange, match=f"index 500 is out of range for {n}"):
        s[[-200, 500]]
    # Long index arrays take NumPy's vectorised checks: the same results.
    long = np.random.default_rng(1).integers(-n, n, 5000)
    np.testing.assert_array_equal(s[long], data[long])
    np.testing.assert_array_equal(s[(long % n).astype(np.uint64)], data[long % n])
    with pytest.raises(IndexOutOfRange, match=f"index -201 is out of range for {n}"):
        s[np.concatenate([long, [-201, 500]])]
    with pytest.raises(IndexOutOfRange, match=f"index 500 is out of range for {n}"):
        s[np.concatenate([long, [500]]).astype(">i4")]
    with pytest.raises(IndexOutOfRange, match=f"index {2**64 - 1} is out of range for {n}"):
        s[np.concatenate([(long % n).astype(np.uint64), [2**64 - 1]]).astype(">u8")]
    s.close()


@ours_only
def test_an_object_dtype_set_from_python_is_refused_not_filled(tmp_path):
    """Store bytes are never written into an array of Python objects, even
    when the handle's ``dtype`` attribute is changed to one (a crash once);
    run in a child so that a regression cannot take pytest down with it."""
    import subprocess
    import sys
    code = (
        "import numpy as np\n"
        "from loaderx.zrecord import DenseStore, RaggedStore\n"
        "with DenseStore('d', np.int64, (2,), 'raw') as s:\n"
        "    s.append(np.arange(8, dtype=np.int64).reshape(4, 2))\n"
        "with RaggedStore('r', np.int64, codec='raw') as r:\n"
        "    r.append([np.arange(3, dtype=np.int64)])\n"
        "for h in (DenseStore('d'), RaggedStore('r')):\n"
        "    h.dtype = np.dtype(object)\n"
        "    try:\n"
        "        print(repr(h[0]))\n"
        "    except (TypeError, ValueError) as e:\n"
        "        print('refused', e)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.count("refused") == 2, r.stdout


@ours_only
def test_unaligned_and_strided_index_arrays(tmp_path):
    n = 100
    data = np.arange(n, dtype=np.int32)
    with DenseStore(tmp_path / "s", np.int32, ()) as s:
        s.append(data)
    s = DenseStore(tmp_path / "s", read_only=True)
    for dt in (np.int64, np.uint64):
        vals = np.array([5, 99, 0, 42], dtype=dt)
        raw = np.frombuffer(b"\0" + vals.tobytes(), dtype=dt, count=4, offset=1)
        assert not raw.flags.aligned
        np.testing.assert_array_equal(s[raw], data[[5, 99, 0, 42]])
        np.testing.assert_array_equal(s[np.array([9, 0, 8, 0, 7], dtype=dt)[::2]], data[[9, 8, 7]])
    s.close()


@ours_only
def test_index_lists_take_numpys_meaning_whatever_their_elements(tmp_path):
    """Short lists of plain ints go the native way; lists of anything else
    (bools: a mask; floats; NumPy scalars; huge ints) keep NumPy's meaning."""
    from loaderx.zrecord import IndexOutOfRange
    n = 6
    data = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    with DenseStore(tmp_path / "s", np.float32, (2,)) as s:
        s.append(data)
    s = DenseStore(tmp_path / "s", read_only=True)
    cases = [
        ([3, 1, 1, -1], [3, 1, 1, 5]),
        ([-6], [0]),
        ([True, False, True, False, False, True], [0, 2, 5]),  # a mask
        ([2.0, 4.0], [2, 4]),
        ([np.int64(4), 1], [4, 1]),
        ([np.uint8(5)], [5]),
    ]
    for lst, want in cases:
        got = s[lst]
        assert got.shape == (len(want), 2) and got.dtype == np.float32
        np.testing.assert_array_equal(got, data[want])
        np.testing.assert_array_equal(s.__getitems__(lst), data[want])
    assert s[[]].shape == (0, 2)
    for bad, named in (([0, 6], 6), ([-7, 1], -7)):
        with pytest.raises(IndexOutOfRange, match=f"index {named} is out of range for {n}"):
            s[bad]
    with pytest.raises(IndexError, match=f"index {2**70} is out of range"):
        s[[2**70]]  # past int64: NumPy's object path, as before
    with pytest.raises(IndexError):
        s[[1.5]]
    s.close()


@ours_only
@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_gather_into_fills_the_callers_array_for_every_index_form(codec):
    data = np.arange(11 * 6, dtype=">i4").reshape(11, 2, 3)  # big-endian too
    with DenseStore("data", data.dtype, (2, 3), codec=codec) as ds:
        ds.append(data)
        for idx in ([4, 0, 4], np.array([-1, 2]), slice(1, 9, 3), data[:, 0, 0] % 2 == 0, []):
            want = data[idx]
            out = np.full(want.shape, -7, dtype=data.dtype)
            assert ds.gather_into(idx, out) is out
            np.testing.assert_array_equal(out, want)
        one = np.zeros((2, 3), dtype=data.dtype)
        assert ds.gather_into(-2, one) is one
        np.testing.assert_array_equal(one, data[-2])
        # A slice of a larger buffer: the rows it covers, nothing around it.
        big = np.zeros((6, 2, 3), dtype=data.dtype)
        ds.gather_into([3, 5], big[2:4])
        np.testing.assert_array_equal(big[2:4], data[[3, 5]])
        assert not big[:2].any() and not big[4:].any()


@ours_only
def test_gather_into_refuses_an_unfit_output_and_writes_nothing():
    data = np.arange(20, dtype=np.float32).reshape(10, 2)
    with DenseStore("data", data.dtype, (2,), codec="raw") as ds:
        ds.append(data)
        cases = [
            (np.zeros((2, 2), np.float64), "dtype '<f8'.*'<f4'"),
            (np.zeros((2, 2), ">f4"), "dtype '>f4'"),
            (np.zeros((3, 2), np.float32), r"shape \(3, 2\).*\(2, 2\)"),
            (np.zeros((4, 2), np.float32)[::2], "C-contiguous"),
            (np.zeros((2, 2), np.float32).T.copy().T, "C-contiguous"),
        ]
        for out, msg in cases:
            with pytest.raises(ValueError, match=msg):
                ds.gather_into([1, 2], out)
        ro = np.zeros((2, 2), np.float32)
        ro.flags.writeable = False
        with pytest.raises(ValueError, match="read-only"):
            ds.gather_into([1, 2], ro)
        with pytest.raises(TypeError, match="numpy.ndarray"):
            ds.gather_into([1, 2], bytearray(16))
        out = np.full((2, 2), 5, np.float32)
        with pytest.raises(IndexError, match="10"):
            ds.gather_into([1, 10], out)
        assert (out == 5).all()  # an index error writes nothing
        ds.close()
        with pytest.raises(ZrecordError, match="closed"):
            ds.gather_into([1], np.zeros((1, 2), np.float32))


@ours_only
def test_gather_into_an_output_that_is_also_the_index_array():
    """Indices read from the bytes being overwritten: they are copied first,
    so the result is the gather of the indices as they were."""
    with DenseStore("data", np.uint64, (), codec="raw") as ds:
        ds.append(np.arange(4000, dtype=np.uint64)[::-1].copy())
        for n in (100, 3000):  # the short native path and the long NumPy one
            buf = np.arange(n, dtype=np.uint64)
            want = ds[buf.copy()]
            assert ds.gather_into(buf, buf) is buf
            np.testing.assert_array_equal(buf, want)
        # Two arrays over one bytearray (different bases, same bytes).
        raw = bytearray(np.arange(3000, dtype=np.uint64).tobytes())
        a = np.frombuffer(memoryview(raw), np.uint64)
        b = np.frombuffer(memoryview(raw), np.uint64)
        want = ds[a.copy()]
        ds.gather_into(a, b)
        np.testing.assert_array_equal(b, want)


@ours_only
@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix
def test_gather_into_large_batches_and_odd_arrays(tmp_path):
    """A batch big enough to be gathered on every core, into the caller's
    memory; more indices than the short native path takes; NumPy subclasses
    and a memory-mapped output."""
    rng = np.random.default_rng(3)
    data = rng.integers(0, 255, (300, 64 << 10), dtype=np.uint8)
    with DenseStore("big", np.uint8, (64 << 10,), codec="zstd") as ds:
        ds.append(data)
        idx = rng.integers(0, 300, 256)
        out = np.empty((256, 64 << 10), np.uint8)
        ds.gather_into(idx, out)
        np.testing.assert_array_equal(out, data[idx])
    with DenseStore("small", np.int32, (2,), codec="raw") as ds:
        small = np.arange(10000, dtype=np.int32).reshape(5000, 2)
        ds.append(small)
        idx = rng.integers(-5000, 5000, 4096)
        out = np.empty((4096, 2), np.int32)
        ds.gather_into(idx, out)
        np.testing.assert_array_equal(out, small[idx])
        m = np.asmatrix(np.zeros((2, 2), np.int32))
        ds.gather_into([1, 2], m)
        np.testing.assert_array_equal(np.asarray(m), small[[1, 2]])
        mm = np.memmap(tmp_path / "out.bin", np.int32, "w+", shape=(3, 2))
        ds.gather_into([4, 0, 4], mm)
        mm.flush()
        np.testing.assert_array_equal(np.fromfile(tmp_path / "out.bin", np.int32).reshape(3, 2),
                                      small[[4, 0, 4]])


# A boolean mask of any rank whose size is the store's length selects the
# records where it is True in C order, flattened (as loaderx 1.7.2 does).
_MASK = np.array([[True, False, True], [False, False, True]])
_ND_MASKS = {
    "2-D": (_MASK, [0, 2, 5]),
    "transposed": (_MASK.T, [0, 4, 5]),  # C order of the view, not memory
    "Fortran": (np.asfortranarray(_MASK), [0, 2, 5]),
    "3-D": (_MASK.reshape(1, 6, 1), [0, 2, 5]),
    "all False": (np.zeros((3, 2), bool), []),
    "nested list": (_MASK.tolist(), [0, 2, 5]),
}


@pytest.mark.parametrize("kind", ["dense", "ragged"])
@pytest.mark.parametrize("name", list(_ND_MASKS))
def test_nd_boolean_mask_of_the_store_size_is_flattened(kind, name):
    mask, want = _ND_MASKS[name]
    if kind == "dense":
        data = np.arange(12, dtype=np.float32).reshape(6, 2)
        with DenseStore("d", data.dtype, (2,)) as s:
            s.append(data)
            got = s[mask]
            assert got.shape == (len(want), 2)
            np.testing.assert_array_equal(got, data[want])
            s.delete(mask)
            np.testing.assert_array_equal(
                np.sort(s[:], axis=0), np.delete(data, want, axis=0))
    else:
        recs = [np.arange(k + 1, dtype=np.int16) for k in range(6)]
        with RaggedStore("r", np.int16) as s:
            s.append(recs)
            assert [g.tolist() for g in s[mask]] == [recs[k].tolist() for k in want]
            s.delete(mask)
            left = sorted(len(g) for g in s[:])
            assert left == sorted(len(recs[k]) for k in range(6) if k not in want)


@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_nd_boolean_mask_past_the_end_is_out_of_range(kind):
    """A True past the last record: loaderx 1.7.2's ZrecordError, code -3
    (here IndexOutOfRange, also an IndexError)."""
    with (DenseStore("d", np.uint8, (1,)) if kind == "dense"
          else RaggedStore("r", np.uint8)) as s:
        s.append(np.zeros((6, 1), np.uint8))
        for mask in (np.ones((3, 3), bool), np.ones((7,), bool)):
            with pytest.raises(ZrecordError) as info:
                s[mask]
            assert info.value.code == -3
        assert len(s) == 6


@ours_only
@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_boolean_mask_of_another_size_is_refused(kind):
    """Stricter than loaderx 1.7.2, which takes a mask of another size as
    far as it goes (a (2, 2) or (5,) mask over 6 records selects among the
    first 4 or 5): any rank, IndexOutOfRange naming the shape."""
    from loaderx.zrecord import IndexOutOfRange
    with (DenseStore("d", np.uint8, (1,)) if kind == "dense"
          else RaggedStore("r", np.uint8)) as s:
        s.append(np.zeros((6, 1), np.uint8))
        for mask in (np.ones((2, 2), bool), np.ones((5,), bool), np.zeros((3, 3), bool),
                     np.array([True] + [False] * 6), np.bool_(True)):
            with pytest.raises(IndexOutOfRange, match=r"boolean mask of shape"):
                s[mask]
            with pytest.raises(IndexError):
                s.delete(mask)
        assert len(s) == 6


def _garble(path, indices, ragged=False):
    """Flips the bytes (past a zstd frame's magic) of records `indices`
    (physical records in a one-chunk, one-segment store)."""
    import os
    locs = open(os.path.join(path, "0.loc"), "rb").read()
    chunk = bytearray(open(os.path.join(path, "0.chunk"), "rb").read())
    for i in indices:
        e = locs[16 * i:16 * i + 16]
        off = int.from_bytes(e[0:4], "little")
        phys = int.from_bytes(e[4:8], "little")
        for k in range(off + 4, off + phys):
            chunk[k] ^= 0x5A
    open(os.path.join(path, "0.chunk"), "wb").write(bytes(chunk))


@ours_only
def test_verify_names_damaged_records():
    from loaderx.zrecord import StoreClosed
    data = np.arange(20 * 64, dtype=np.int32).reshape(20, 64) % 7
    with DenseStore("v", data.dtype, (64,), codec="zstd") as ds:
        ds.append(data)
        rep = ds.verify()
        assert rep == {"ok": True, "records": 20, "decoded_bytes": data.nbytes,
                       "bad": [], "problems": []}
    _garble("v", [3, 12])
    with DenseStore("v", read_only=True) as ds:
        rep = ds.verify()
        assert rep["ok"] is False and rep["problems"] == []
        assert [i for i, _ in rep["bad"]] == [3, 12], rep
        assert all("does not decode" in what for _, what in rep["bad"]), rep
        # The other records still read.
        np.testing.assert_array_equal(ds[[0, 19]], data[[0, 19]])
    with pytest.raises(StoreClosed):
        ds.verify()
