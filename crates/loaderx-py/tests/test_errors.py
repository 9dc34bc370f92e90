"""The exception hierarchy: every native failure is a ZrecordError (a
RuntimeError, as in loaderx 1.7.2) with the reference's code, and the kinds
that have a natural builtin also derive from it."""

import errno
import os

import numpy as np
import pytest

from loaderx.zrecord import DenseStore, RaggedStore, ZrecordError

from conftest import OURS, ours_only


def test_zrecord_error_is_runtime_error_with_code():
    assert issubclass(ZrecordError, RuntimeError)
    e = ZrecordError(-14)
    assert e.code == -14 and "busy" in str(e)
    assert ZrecordError(-3).code == -3


@ours_only
def test_hierarchy():
    from loaderx import zrecord as z
    pairs = [(z.StoreBusy, -14, ()), (z.IndexOutOfRange, -3, (IndexError,)),
             (z.StoreNotFound, -11, (FileNotFoundError,)),
             (z.KindMismatch, -13, (ValueError,)),
             (z.ReadOnlyStore, -15, (PermissionError,)),
             (z.StoreClosed, -16, (ValueError,)), (z.CorruptRecord, -7, ()),
             (z.InvalidStore, -8, ()), (z.UnsupportedDType, -8, (ValueError, TypeError))]
    for cls, code, bases in pairs:
        e = cls()
        assert isinstance(e, ZrecordError) and isinstance(e, RuntimeError)
        assert e.code == code
        for b in bases:
            assert isinstance(e, b)


@ours_only
def test_unsupported_dtypes_are_refused_before_creation(tmp_path):
    from loaderx.zrecord import UnsupportedDType
    for dt in ("<U4", "S3", "datetime64[ns]"):
        with pytest.raises(UnsupportedDType):
            DenseStore(f"s_{len(dt)}", dt, (2,))
        with pytest.raises(ValueError):
            RaggedStore(f"r_{len(dt)}", dt)


@ours_only
def test_corrupted_store_is_reported(tmp_path):
    from loaderx.zrecord import InvalidStore
    with DenseStore("d", np.uint8, (4,)) as ds:
        ds.append(np.zeros((3, 4), np.uint8))
    (tmp_path / "d" / "meta.zr").write_bytes(b"garbage" * 3)
    with pytest.raises(ZrecordError) as info:
        DenseStore("d")
    assert isinstance(info.value, InvalidStore)
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "meta.zr").write_bytes(b"\0" * 32)
    with pytest.raises(InvalidStore):
        DenseStore("e")


@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_a_frame_that_fails_to_decode_is_a_corrupt_record(tmp_path, kind):
    """A damaged zstd frame raises code -7, "stored record failed to
    decode", as loaderx 1.7.2 does (this test runs on both packages); ours
    is the CorruptRecord subclass and names the record. Records before it
    still read."""
    data = np.arange(3 * 64, dtype=np.uint8).reshape(3, 64)
    if kind == "dense":
        with DenseStore("s", np.uint8, (64,), "zstd") as s:
            s.append(data)
    else:
        with RaggedStore("s", np.uint8, codec="zstd") as s:
            s.append(list(data))
    chunk = tmp_path / "s" / "0.chunk"
    raw = bytearray(chunk.read_bytes())
    magic = b"\x28\xb5\x2f\xfd"
    last = raw.rfind(magic)  # the last record's frame (ragged: its shape's)
    assert last > 0
    raw[last:last + 4] = b"\0\0\0\0"
    chunk.write_bytes(bytes(raw))
    opened = DenseStore("s") if kind == "dense" else RaggedStore("s")
    with opened as s:
        np.testing.assert_array_equal(s[0], data[0])
        if not OURS:
            # loaderx 1.7.2 sometimes (dense 15, ragged 6 of 200 runs here)
            # returns the record intact from the frame whose magic was
            # zeroed; when it raises, it raises -7, which is what is pinned.
            try:
                s[[0, 2]]
            except ZrecordError as e:
                assert e.code == -7
            return
        with pytest.raises(ZrecordError) as info:
            s[[0, 2]]
        assert info.value.code == -7
        if hasattr(info.value, "__module__") and type(info.value).__name__ != "ZrecordError":
            assert type(info.value).__name__ == "CorruptRecord"
            assert "record 2" in str(info.value)


@pytest.mark.parametrize("field, at, value", [("offset", 0, 0xFFFF0), ("phys_length", 4, 0xFFFF),
                                              ("chunk_id", 12, 5)])
def test_a_damaged_entry_found_at_open_is_an_invalid_store(tmp_path, field, at, value):
    """Damage the open check finds, even in one record's entry, is code -8
    (the store's), as in loaderx 1.7.2 (this test runs on both packages);
    -7 is for a record that fails on read."""
    with DenseStore("s", np.uint8, (64,), "raw") as s:
        s.append(np.arange(3 * 64, dtype=np.uint8).reshape(3, 64))
    loc = tmp_path / "s" / "0.loc"
    raw = bytearray(loc.read_bytes())
    raw[2 * 16 + at:2 * 16 + at + 4] = value.to_bytes(4, "little")
    loc.write_bytes(bytes(raw))
    with pytest.raises(ZrecordError) as info:
        DenseStore("s")
    assert info.value.code == -8, f"{field}: {info.value!r}"


def test_append_after_close_fails():
    ds = DenseStore("d", np.uint8, (4,))
    ds.close()
    with pytest.raises(Exception):
        ds.append(np.zeros((1, 4), np.uint8))


# --- messages name the argument, record, file or stream at fault ----------

@ours_only
def test_sampler_and_loader_integer_arguments_are_named():
    from loaderx.dataloader import DataLoader
    from loaderx.zsampler import Sampler
    for kw, exc, name in (
        (dict(seed=-5), OverflowError, "seed"),
        (dict(batch_size=-1), OverflowError, "batch_size"),
        (dict(mode=-1), OverflowError, "mode"),
        (dict(length=-10), OverflowError, "length"),
        (dict(batch_size=4.0), TypeError, "batch_size"),
        (dict(seed=None), TypeError, "seed"),
        (dict(seed=2**64), OverflowError, "seed"),
        (dict(mode=256), OverflowError, "mode"),
    ):
        args = dict(length=10, batch_size=4, mode=1, seed=42) | kw
        with pytest.raises(exc, match=name):
            Sampler(args["length"], args["batch_size"], args["mode"], args["seed"])
    s = Sampler(10, 4, 1)
    with pytest.raises(OverflowError, match="step"):
        s.seek(-1)
    with pytest.raises(TypeError, match="step"):
        s.batch_at(1.5)
    assert list(s.batch_at(3)) == list(Sampler(10, 4, 1).batch_at(np.int64(3)))
    with DenseStore("x", np.float32, (2,)) as ds:
        ds.append(np.zeros((8, 2), np.float32))
        with pytest.raises(OverflowError, match="seed"):
            DataLoader({"x": ds}, seed=-1)


@ours_only
def test_loader_streams_of_the_wrong_kind_and_errors_with_their_stream(monkeypatch):
    import sys
    from loaderx.dataloader import DataLoader
    with DenseStore("x", np.float32, (2,)) as ds:
        ds.append(np.zeros((8, 2), np.float32))
        with pytest.raises(TypeError, match="streams must be a dict"):
            DataLoader(ds)
        with pytest.raises(ValueError, match="streams must be a dict"):
            DataLoader([ds])  # dict()'s own type, as the reference
        with pytest.raises(TypeError, match="streams must be a dict"):
            DataLoader(5)
        with pytest.raises(TypeError, match="stream 'y' is a ndarray.*__getitems__"):
            DataLoader({"x": ds, "y": np.zeros((8, 2))})

        class Labels:
            def __len__(self):
                return 8

            def __getitems__(self, idxs):
                raise KeyError("label table missing")

        with DataLoader({"x": ds, "labels": Labels()}, batch_size=4) as loader:
            with pytest.raises(KeyError) as got:
                next(loader)
        if sys.version_info >= (3, 11):
            assert "while gathering stream 'labels' for step 0" in got.value.__notes__

        def transform(batch):
            raise ArithmeticError("bad batch")

        with DataLoader({"x": ds}, batch_size=4, transform=transform, start_step=5) as loader:
            with pytest.raises(ArithmeticError) as got:
                next(loader)
        if sys.version_info >= (3, 11):
            assert "in the DataLoader's transform, at step 5" in got.value.__notes__


@ours_only
def test_creation_arguments_are_checked_and_named():
    from loaderx.zrecord import StoreNotFound
    with pytest.raises(StoreNotFound, match="needs dtype and item_shape"):
        DenseStore("new", np.float32)
    with pytest.raises(StoreNotFound, match="RaggedStore needs dtype"):
        RaggedStore("new")
    with pytest.raises(StoreNotFound, match="read_only=True never creates one"):
        DenseStore("new", read_only=True)
    with pytest.raises(TypeError, match=r"did you mean \(4,\)"):
        DenseStore("a", np.float32, 4)
    for shape in ((4.9,), ("4",), (True,)):
        with pytest.raises(TypeError, match="item_shape entries must be integers"):
            DenseStore("a", np.float32, shape)
    with pytest.raises(ValueError, match=r"item_shape \(3, 0, 5\) gives empty records"):
        DenseStore("a", np.float32, (3, 0, 5))
    with pytest.raises(ValueError, match="4294967296-byte records; the limit is 2147483648"):
        DenseStore("a", np.float32, (1024, 1024, 1024))
    with pytest.raises(ValueError, match="64 dimensions; at most 63"):
        DenseStore("a", np.float32, (1,) * 64)
    for bad in (5, "abc"):
        with pytest.raises(TypeError, match="dict_bytes must be the bytes train_dict returned"):
            DenseStore("a", np.uint8, (4,), codec="zstd_dict", dict_bytes=bad)
    DenseStore("ok", np.float32, (np.int64(2), 3)).close()
    with pytest.raises(TypeError, match="item_shape entries"):
        DenseStore("ok", np.float32, (2.5, 3))  # checked on reopen too
    DenseStore("ok", np.float32, (2.0, 3)).close()  # whole floats, as the reference


def test_dict_bytes_that_is_no_bytes_like_object_is_refused():
    # bytes([1, 2, 3]) made a 3-byte dictionary of a list (a store created
    # with it, silently); loaderx 1.7.2 raises TypeError ("a bytes-like
    # object is required").
    for bad in ([1, 2, 3], (7, 8), [b"ab"]):
        with pytest.raises(TypeError):
            RaggedStore("r", np.uint8, codec="zstd_dict", dict_bytes=bad)
        with pytest.raises(TypeError):
            DenseStore("d", np.uint8, (4,), codec="zstd_dict", dict_bytes=bad)


@ours_only
def test_ragged_append_names_the_record_of_the_batch():
    with RaggedStore("r", np.int64) as rs:
        good = [np.arange(3)] * 5
        with pytest.raises(ValueError, match="record 5 of the batch has dtype int32, the store holds int64"):
            rs.append(good + [np.arange(3, dtype=np.int32)])
        with pytest.raises(ValueError, match=r"record 1 of the batch is empty \(shape \(0,\)\)"):
            rs.append([np.arange(2), np.arange(0)])
        with pytest.raises(ValueError, match="record 0 of the batch is bytes"):
            rs.append([b"abc"])
        assert len(rs) == 0  # nothing half-appended


@ours_only
def test_index_messages_show_plain_values():
    with DenseStore("x", np.float32, (2,)) as ds:
        ds.append(np.zeros((8, 2), np.float32))
        with pytest.raises(IndexError, match=r"got str 'a'"):
            ds["a"]
        with pytest.raises(IndexError, match=r"record index 1\.5 is not"):
            ds[[1.5]]
        for big in ([2**70], [1e20]):
            with pytest.raises(IndexError, match=r"x: record index 1.* is out of range"):
                ds[big]


@ours_only
def test_a_ragged_shape_record_of_too_high_rank_is_a_corrupt_record(tmp_path):
    """A stored shape of rank 65 (NumPy allows 64): CorruptRecord naming the
    store, the store index and the rank, whatever the batch position."""
    import struct
    from loaderx.zrecord import CorruptRecord
    p = str(tmp_path / "r")
    with RaggedStore(p, np.float32, codec="raw") as rs:
        rs.append([np.ones(1, np.float32), np.ones(2, np.float32)])
    end = (tmp_path / "r" / "0.chunk").stat().st_size
    shape_rec = struct.pack("<Q", 65) + struct.pack("<Q", 1) * 65
    with open(f"{p}/0.chunk", "ab") as f:
        f.write(shape_rec)
    meta = bytearray(open(f"{p}/meta.zr", "rb").read())
    meta[10:14] = struct.pack("<I", end + len(shape_rec))
    open(f"{p}/meta.zr", "wb").write(bytes(meta))
    loc = bytearray(open(f"{p}/0.loc", "rb").read())
    loc[16:32] = struct.pack("<IIII", end, len(shape_rec), len(shape_rec), 0)
    open(f"{p}/0.loc", "wb").write(bytes(loc))
    with RaggedStore(p) as rs:
        for idx in (0, [1, 1, 0]):
            with pytest.raises(CorruptRecord, match=r"r: record 0 is corrupted: stored rank 65"):
                rs[idx]
        with pytest.raises(CorruptRecord, match="record 0 is corrupted"):
            rs.gather_packed([1, 0])
        assert rs[1].shape == (2,)


@ours_only
def test_a_subarray_dtype_says_how_to_store_it():
    from loaderx.zrecord import UnsupportedDType
    with pytest.raises(UnsupportedDType, match=r"base dtype '<f4' and put \(3,\) in the record shape"):
        DenseStore("a", np.dtype(("<f4", (3,))), (2,))
    with pytest.raises(UnsupportedDType, match=r"field \"name\": string dtypes"):
        DenseStore("b", np.dtype([("x", "<f4"), ("name", "S3")]), (2,))


@ours_only
@pytest.mark.skipif(np.dtype(np.longdouble).itemsize <= 8,
                    reason="long double is a plain double on this platform")
def test_a_long_double_refusal_says_long_double():
    """np.longdouble (<f16 on x86-64) was refused as "no such size for
    this kind", as if 16 were a typo; it names long double and the way out."""
    from loaderx.zrecord import UnsupportedDType
    with pytest.raises(UnsupportedDType, match=r"long double .* convert to float64"):
        DenseStore("a", np.longdouble, (2,))
    with pytest.raises(UnsupportedDType, match=r"long double .* convert to float64"):
        RaggedStore("b", np.clongdouble)


@ours_only
def test_a_refused_nested_field_is_named_by_its_path():
    """A refusal inside a nested structure names the whole path to the
    field, not only its innermost name; nothing is created."""
    from loaderx.zrecord import UnsupportedDType
    inner = [("c", "<i4"), ("when", "<M8[ns]")]
    with pytest.raises(UnsupportedDType, match=r'field "outer\.when": datetime64'):
        DenseStore("a", np.dtype([("x", "<f4"), ("outer", inner)]), (2,))
    deep = [("top", [("mid", [("name", "S3")])])]
    with pytest.raises(UnsupportedDType, match=r'field "top\.mid\.name": string'):
        RaggedStore("b", np.dtype(deep))
    with pytest.raises(ValueError, match=r"object dtypes cannot be persisted \(field 'top\.obj'\)"):
        DenseStore("c", np.dtype([("top", [("n", "<i4"), ("obj", "O")])]), (2,))
    import os
    assert not any(os.path.exists(p) for p in ("a", "b", "c"))


@ours_only
def test_io_error_messages_name_the_file_and_the_os_reason_once(tmp_path):
    """The Rust errors no longer repeat their OS error in their own message
    (it is their `source()`, so chain printers showed it twice); the
    binding builds the message from the whole chain, so it still names the
    file and the reason, each once."""
    import errno
    import os
    from loaderx.io import load_npy
    from loaderx._errors import StoreIOError, StoreNotFound

    missing = tmp_path / "missing.npy"
    with pytest.raises(StoreNotFound) as caught:
        load_npy(missing)
    m = str(caught.value)
    assert m.count(str(missing)) == 1, m
    assert m.count(os.strerror(errno.ENOENT)) == 1, m

    # A store whose record table is a directory: the engine's open fails
    # with the OS's EISDIR, named with the call and the file.
    path = tmp_path / "s"
    s = DenseStore(str(path), dtype=np.float32, item_shape=(4,))
    s.append(np.zeros((10, 4), np.float32))
    s.close()
    loc = path / "0.loc"
    os.remove(loc)
    os.mkdir(loc)
    with pytest.raises(StoreIOError) as caught:
        DenseStore(str(path))
    m = str(caught.value)
    assert m.count(str(loc)) == 1, m
    assert m.startswith(f"open {loc}: "), m
    assert m.count(os.strerror(errno.EISDIR)) == 1, m


def _store(path, kind):
    if kind == "dense":
        with DenseStore(str(path), np.uint8, (4,), "raw") as s:
            s.append(np.zeros((3, 4), np.uint8))
    else:
        with RaggedStore(str(path), np.uint8, codec="raw") as s:
            s.append([np.zeros(3, np.uint8)] * 3)


def _open(path, kind, *args, **kw):
    return (DenseStore if kind == "dense" else RaggedStore)(str(path), *args, **kw)


@ours_only
@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_an_engine_io_error_is_an_oserror_with_errno_and_filename(tmp_path, kind):
    """Regression: an I/O error of the engine (a store's own files) was a
    StoreIOError without errno, strerror or filename, which only the typed
    layer's I/O errors carried. A chunk file replaced by a directory (which
    denies a read even to root, unlike chmod): both opens fail to open it
    (a read-only open used to open it and fail at the first gather; store
    files that are no regular files are refused when opened, since a FIFO
    there blocked the open for good)."""
    from loaderx._errors import StoreIOError
    path = tmp_path / "s"
    _store(path, kind)
    chunk = path / "0.chunk"
    os.remove(chunk)
    os.mkdir(chunk)
    with pytest.raises(OSError) as caught:
        _open(path, kind)
    e = caught.value
    assert isinstance(e, StoreIOError) and e.code == -2
    assert (e.errno, e.strerror, e.filename) == (errno.EISDIR, os.strerror(errno.EISDIR), str(chunk))
    assert str(e).startswith(f"open {chunk}: "), str(e)

    with pytest.raises(OSError) as caught:
        _open(path, kind, read_only=True)
    e = caught.value
    assert isinstance(e, StoreIOError)
    assert (e.errno, e.filename) == (errno.EISDIR, str(chunk))
    assert str(e).startswith(f"open {chunk}: "), str(e)


@ours_only
@pytest.mark.parametrize("kind", ["dense", "ragged"])
@pytest.mark.parametrize("name", ["meta.zr", "0.chunk", "0.loc"])
def test_a_store_file_that_is_a_fifo_fails_the_open_at_once(tmp_path, kind, name):
    """Regression: a store file replaced by a FIFO blocked the open for good
    (opening a FIFO waits for its other end). Now it is a StoreIOError
    naming the file, from either open."""
    import subprocess
    import sys
    path = tmp_path / "s"
    _store(path, kind)
    f = path / name
    os.remove(f)
    os.mkfifo(f)
    # In a child, so that a blocked open fails this test instead of hanging it.
    code = (
        "import sys\n"
        "from loaderx.zrecord import DenseStore, RaggedStore\n"
        f"cls = {'DenseStore' if kind == 'dense' else 'RaggedStore'}\n"
        "for ro in (False, True):\n"
        "    try:\n"
        "        cls(sys.argv[1], read_only=ro)\n"
        "        print('opened')\n"
        "    except OSError as e:\n"
        "        print(type(e).__name__, e.filename)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")[:2]
    assert all(line.split(" ", 1)[1].endswith(name) for line in lines), out.stdout
    assert all(line.split(" ", 1)[0] in ("StoreIOError", "InvalidStore") for line in lines), out.stdout


@pytest.mark.parametrize("kind", ["dense", "ragged"])
@pytest.mark.parametrize("name", ["0.chunk", "0.loc"])
@pytest.mark.parametrize("how", ["dangling symlink", "removed"])
def test_a_store_file_that_is_not_there_is_an_invalid_store(tmp_path, kind, name, how):
    """A file the store needs but the OS cannot find, whether its name is
    gone or left as a dangling symlink: code -8, the store is damaged, as
    loaderx 1.7.2 says (this test runs on both packages). Regression: the
    dangling symlink was StoreNotFound (-11, "store not found", a
    FileNotFoundError) for a store that is there, while the removed file
    was -8. Ours names the file and the OS reason."""
    path = tmp_path / "s"
    _store(path, kind)
    f = path / name
    os.remove(f)
    if how == "dangling symlink":
        os.symlink(tmp_path / "nowhere", f)
    with pytest.raises(ZrecordError) as caught:
        _open(path, kind)
    e = caught.value
    assert e.code == -8, (type(e), e)
    assert not isinstance(e, FileNotFoundError)
    if OURS:
        from loaderx.zrecord import InvalidStore
        assert isinstance(e, InvalidStore)
        assert str(f) in str(e), str(e)
        if how == "dangling symlink":
            assert os.strerror(errno.ENOENT) in str(e), str(e)


@pytest.mark.parametrize("kind, args", [("dense", ()), ("dense", (np.uint8, (4,))),
                                        ("ragged", ()), ("ragged", (np.uint8,))])
def test_a_store_whose_create_was_interrupted_is_an_invalid_store(tmp_path, kind, args):
    """A directory holding only an empty meta.zr (a create cut short before
    it wrote the header): code -8, as loaderx 1.7.2 (this test runs on both
    packages), whether opened or created over; ours is InvalidStore and says
    the create did not finish, naming the directory. Nothing is touched.
    Ours differs when created over: the create clears the leftover and
    makes the store (test_create_leftovers.py)."""
    path = tmp_path / "s"
    path.mkdir()
    (path / "meta.zr").write_bytes(b"")
    if OURS and args:
        _open(path, kind, *args).close()
        assert len(_open(path, kind)) == 0
        return
    with pytest.raises(ZrecordError) as caught:
        _open(path, kind, *args)
    assert caught.value.code == -8
    if OURS:
        from loaderx.zrecord import InvalidStore
        assert isinstance(caught.value, InvalidStore)
        m = str(caught.value)
        assert str(path) in m and "meta.zr" in m and "did not finish" in m, m
    assert os.listdir(path) == ["meta.zr"]
    assert (path / "meta.zr").stat().st_size == 0
