"""loaderx.io: parallel loadtxt (fast_loadtxt's signature) and the .npy
readers, checked against numpy's own loadtxt / load on the same files."""

import errno
import os

import numpy as np
import pytest

from conftest import ours_only

pytestmark = ours_only


def test_loadtxt_matches_numpy(tmp_path):
    from loaderx.io import loadtxt
    rng = np.random.default_rng(0)
    a = rng.normal(size=(2000, 5))
    path = tmp_path / "x.dat"
    np.savetxt(path, a, header="a b c d e")
    got = loadtxt(path)
    np.testing.assert_array_equal(got, np.loadtxt(path))
    assert got.dtype == np.float64 and got.shape == (2000, 5)
    got = loadtxt(str(path), num_threads=1, chunk_size=7)
    np.testing.assert_array_equal(got, np.loadtxt(path))
    f32 = loadtxt(path, dtype=np.float32)
    assert f32.dtype == np.float32
    np.testing.assert_array_equal(f32, np.loadtxt(path, dtype=np.float32))


def test_loadtxt_options(tmp_path):
    from loaderx.io import loadtxt
    path = tmp_path / "x.csv"
    path.write_text("a,b,c\n1,2,3\n# note\n4,5,6\n\n7,8,9\n")
    got = loadtxt(path, skip_rows=1, delimiter=",")
    np.testing.assert_array_equal(got, [[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    got = loadtxt(path, skip_rows=1, delimiter=",", usecols=[2, 0], max_rows=2)
    np.testing.assert_array_equal(got, [[3, 1], [6, 4]])
    alt = tmp_path / "alt.dat"
    alt.write_text("% c\n1 2\n3 4\n")
    np.testing.assert_array_equal(loadtxt(alt, comment="%"), [[1, 2], [3, 4]])


def test_loadtxt_errors(tmp_path):
    from loaderx.io import loadtxt
    with pytest.raises(FileNotFoundError):
        loadtxt(tmp_path / "none.dat")
    bad = tmp_path / "bad.dat"
    bad.write_text("1 2\n3 x\n")
    with pytest.raises(ValueError, match="bad.dat:2"):
        loadtxt(bad)
    ragged = tmp_path / "ragged.dat"
    ragged.write_text("1 2\n3 4 5\n")
    with pytest.raises(ValueError):
        loadtxt(ragged)
    with pytest.raises(ValueError):
        loadtxt(bad, dtype=np.int32)
    with pytest.raises(ValueError):
        loadtxt(bad, comment="##")


@pytest.mark.parametrize("dtype", ["<f4", ">i8", "|u1", "<c8"])
def test_npy_load_prefix_header(tmp_path, dtype):
    from loaderx.io import load_npy, load_npy_prefix, npy_header
    a = (np.arange(60) % 17).astype(dtype).reshape(10, 3, 2)
    path = tmp_path / "a.npy"
    np.save(path, a)
    h = npy_header(path)
    assert h["dtype"] == a.dtype and h["dtype"].str == a.dtype.str
    assert h["shape"] == (10, 3, 2) and h["fortran_order"] is False
    assert h["version"] == (1, 0) and h["payload_bytes"] == a.nbytes
    full = load_npy(path)
    assert full.dtype.str == np.load(path).dtype.str
    np.testing.assert_array_equal(full, a)
    pre = load_npy_prefix(path, 4)
    assert pre.shape == (4, 3, 2)
    np.testing.assert_array_equal(pre, a[:4])
    assert load_npy_prefix(path, 0).shape == (0, 3, 2)
    with pytest.raises(ValueError):
        load_npy_prefix(path, 11)


def test_npy_structured_fortran_and_errors(tmp_path):
    from loaderx.io import load_npy, load_npy_prefix
    s = np.zeros(5, [("a", "<i4"), ("b", ">f8", (2,))])
    s["a"] = np.arange(5)
    np.save(tmp_path / "s.npy", s)
    got = load_npy(tmp_path / "s.npy")
    assert got.dtype == s.dtype and got.tobytes() == s.tobytes()
    f = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    np.save(tmp_path / "f.npy", f)
    np.testing.assert_array_equal(load_npy(tmp_path / "f.npy"), f)
    with pytest.raises(ValueError):
        load_npy_prefix(tmp_path / "f.npy", 1)
    (tmp_path / "junk.npy").write_bytes(b"not an npy file at all")
    with pytest.raises(ValueError):
        load_npy(tmp_path / "junk.npy")
    full = np.arange(100, dtype=np.int64)
    np.save(tmp_path / "t.npy", full)
    raw = (tmp_path / "t.npy").read_bytes()
    (tmp_path / "t.npy").write_bytes(raw[:-80])
    with pytest.raises(ValueError):
        load_npy(tmp_path / "t.npy")
    np.testing.assert_array_equal(load_npy_prefix(tmp_path / "t.npy", 50), full[:50])


def test_npy_padded_structured_dtypes_load_as_numpy_does(tmp_path):
    from loaderx.io import load_npy, load_npy_prefix, npy_header
    for dtype in (
        np.dtype([("a", "u1"), ("b", "<f8")], align=True),
        np.dtype({"names": ["x", "y"], "formats": ["<i2", "<f4"],
                  "offsets": [2, 8], "itemsize": 16}),
    ):
        a = np.zeros(4, dtype)
        a[dtype.names[0]] = np.arange(4)
        a[dtype.names[1]] = 0.5
        path = tmp_path / "p.npy"
        np.save(path, a)
        want = np.load(path)
        assert npy_header(path)["dtype"] == want.dtype == dtype
        for got in (load_npy(path), load_npy_prefix(path, 4)):
            assert got.dtype == want.dtype and got.dtype.names == dtype.names
            assert got.tolist() == want.tolist()
        # What came back saves and loads again (padding fields would not).
        np.save(tmp_path / "again.npy", load_npy(path))
        assert load_npy(tmp_path / "again.npy").dtype == dtype


def test_loadtxt_follows_numpy_on_comments_and_usecols(tmp_path):
    from loaderx.io import loadtxt
    path = tmp_path / "c.dat"
    # A comment byte that numbers contain still cuts the line, as in numpy.
    path.write_text("21\n31\n")
    np.testing.assert_array_equal(loadtxt(path, comment="1").ravel(),
                                  np.loadtxt(path, comments="1"))
    path.write_text("1.5\n2.25\n")
    np.testing.assert_array_equal(loadtxt(path, comment=".").ravel(),
                                  np.loadtxt(path, comments="."))
    csv = tmp_path / "u.csv"
    csv.write_text("1,2,3\n4,5,6\n")
    for cols in ([-1, 0, 0], [1, -2], [-3]):
        np.testing.assert_array_equal(
            loadtxt(csv, delimiter=",", usecols=cols),
            np.loadtxt(csv, delimiter=",", usecols=cols, ndmin=2))
    with pytest.raises(ValueError, match="usecols index -4 is out of range"):
        loadtxt(csv, delimiter=",", usecols=[-4])


def test_loadtxt_refuses_what_it_cannot_read_clearly(tmp_path):
    import gzip
    from loaderx.io import loadtxt
    cr = tmp_path / "mac.dat"
    cr.write_bytes(b"1 2\r3 4\r")
    with pytest.raises(ValueError, match="mac.dat:1: a lone carriage return"):
        loadtxt(cr)
    crlf = tmp_path / "dos.dat"
    crlf.write_bytes(b"1 2\r\n3 4\r\n")
    np.testing.assert_array_equal(loadtxt(crlf), [[1, 2], [3, 4]])
    gz = tmp_path / "a.dat.gz"
    gz.write_bytes(gzip.compress(b"1 2\n"))
    with pytest.raises(ValueError, match="gzip-compressed"):
        loadtxt(gz)
    with pytest.raises(IsADirectoryError):
        loadtxt(tmp_path)
    ok = tmp_path / "ok.dat"
    ok.write_text("1 2\n")
    with pytest.raises(ValueError, match="max_rows"):
        loadtxt(ok, max_rows=-1)
    for bad in ({"delimiter": "§"}, {"comment": "§"}, {"comment": " "}):
        with pytest.raises(ValueError, match="ASCII|whitespace"):
            loadtxt(ok, **bad)


def test_a_lone_cr_in_a_comment_is_an_error_not_lost_rows(tmp_path):
    # Regression: the rows after a CR inside a comment silently vanished.
    from loaderx.io import loadtxt
    for name, data, line in (("hdr.dat", b"# x y\r1 2\r3 4\r", 1),
                             ("note.dat", b"1 2 # note\r3 4\n5 6\n", 1),
                             ("mid.dat", b"1 2\n# c\r3 4\n5 6\n", 2)):
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(ValueError, match=f"{name}:{line}: a lone carriage return"):
            loadtxt(path)


def test_loadtxt_reads_pipes_fifos_and_procfs(tmp_path):
    # Regression: a pipe, FIFO or procfs file reports size 0 and came back
    # as an empty (0, 0) array.
    import os
    import threading
    from loaderx.io import loadtxt
    r, w = os.pipe()
    os.write(w, b"1 2\n3 4\n")
    os.close(w)
    try:
        np.testing.assert_array_equal(loadtxt(f"/dev/fd/{r}"), [[1, 2], [3, 4]])
    finally:
        os.close(r)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_bytes, args=(b"5,6\n7,8\n",))
    writer.start()
    got = loadtxt(fifo, delimiter=",")
    writer.join()
    np.testing.assert_array_equal(got, [[5, 6], [7, 8]])
    if os.path.exists("/proc/sys/kernel/pid_max"):
        got = loadtxt("/proc/sys/kernel/pid_max")
        assert got.shape == (1, 1) and got[0, 0] > 0
    (tmp_path / "empty.dat").write_bytes(b"")
    assert loadtxt(tmp_path / "empty.dat").shape == (0, 0)


def test_load_npy_reads_a_pipe(tmp_path):
    # Regression: load_npy on a pipe failed with a bare "Illegal seek".
    import os
    import threading
    from loaderx.io import load_npy, load_npy_prefix, npy_header
    a = np.arange(12, dtype=">i4").reshape(4, 3)
    np.save(tmp_path / "a.npy", a)
    raw = (tmp_path / "a.npy").read_bytes()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for read, want in ((load_npy, a), (lambda p: load_npy_prefix(p, 2), a[:2])):
        writer = threading.Thread(target=fifo.write_bytes, args=(raw,))
        writer.start()
        got = read(fifo)
        writer.join()
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
        got[0, 0] = 7  # writable, as np.load's
    writer = threading.Thread(target=fifo.write_bytes, args=(raw[:-8],))
    writer.start()
    with pytest.raises(ValueError, match="fifo"):
        load_npy(fifo)
    writer.join()
    r, w = os.pipe()
    os.write(w, raw)
    os.close(w)
    try:
        with pytest.raises(OSError, match="not a regular file"):
            npy_header(f"/dev/fd/{r}")
    finally:
        os.close(r)


def test_error_names_the_first_bad_line_with_any_threads(tmp_path):
    from loaderx.io import loadtxt
    lines = ["1 2 3\n"] * 20000
    lines[9000] = "1 x 3\n"
    for j in range(10000, 20000, 500):
        lines[j] = "1 2\n"
    path = tmp_path / "two.dat"
    path.write_text("".join(lines))
    for _ in range(5):
        with pytest.raises(ValueError, match=r"two.dat:9001: column 2: "):
            loadtxt(path, num_threads=2, chunk_size=50)


def test_loadtxt_integer_arguments_as_numpy(tmp_path):
    from loaderx.io import loadtxt
    path = tmp_path / "args.dat"
    path.write_text("1 2 3 4 5 6 7 8 9 10 11 12\n" * 3)
    np.testing.assert_array_equal(loadtxt(path, usecols=3), [[4]] * 3)
    np.testing.assert_array_equal(loadtxt(path, usecols=np.int64(-1)), [[12]] * 3)
    np.testing.assert_array_equal(loadtxt(path, usecols=(np.int32(1), 0)), [[2, 1]] * 3)
    np.testing.assert_array_equal(loadtxt(path, skip_rows=np.int64(1), max_rows=np.uint8(1)),
                                  [list(range(1, 13))])
    for bad in ({"usecols": [1.7]}, {"usecols": "10"}, {"usecols": 1.5},
                {"usecols": 1.0}, {"skip_rows": 1.5}, {"max_rows": 2.9},
                {"chunk_size": 10.0}, {"num_threads": "2"}):
        with pytest.raises(TypeError):
            loadtxt(path, **bad)
    assert loadtxt(path, usecols=[]).shape == (3, 0)
    assert loadtxt(path, usecols=[], max_rows=2).shape == (2, 0)


def test_load_npy_prefix_rows_must_be_an_integer(tmp_path):
    from loaderx.io import load_npy_prefix
    np.save(tmp_path / "a.npy", np.arange(10.0))
    np.testing.assert_array_equal(load_npy_prefix(tmp_path / "a.npy", np.int64(3)), [0, 1, 2])
    for bad in (1.5, 2.9, "2"):
        with pytest.raises(TypeError):
            load_npy_prefix(tmp_path / "a.npy", bad)


def test_a_missing_file_is_a_file_not_found_error_with_errno(tmp_path):
    import errno
    from loaderx._errors import ZrecordError
    from loaderx.io import load_npy, load_npy_prefix, loadtxt, npy_header
    missing = tmp_path / "missing.npy"
    for call in (load_npy, npy_header, lambda p: load_npy_prefix(p, 1), loadtxt):
        with pytest.raises(FileNotFoundError) as caught:
            call(missing)
        e = caught.value
        assert isinstance(e, ZrecordError)
        assert e.errno == errno.ENOENT and e.filename == str(missing)
        assert "missing.npy" in str(e)


def test_loadtxt_error_columns_count_from_one(tmp_path):
    from loaderx.io import loadtxt
    path = tmp_path / "col.dat"
    path.write_text("1 2 3\n4 x 6\n")
    with pytest.raises(ValueError, match=r'col.dat:2: column 2: cannot parse "x"'):
        loadtxt(path)
    path.write_text("1,2\ny,3\n")
    with pytest.raises(ValueError, match=r"col.dat:2: column 1: "):
        loadtxt(path, delimiter=",")


def test_loadtxt_huge_num_threads_is_clamped(tmp_path):
    # Regression: num_threads=3000 on a 2-line file started (and kept) a
    # 3000-thread pool.
    import os
    from loaderx.io import loadtxt
    path = tmp_path / "two.dat"
    path.write_text("1 2\n3 4\n")
    np.testing.assert_array_equal(loadtxt(path, num_threads=3000), [[1, 2], [3, 4]])
    if os.path.isdir("/proc/self/task"):
        assert len(os.listdir("/proc/self/task")) < 4 * os.cpu_count() + 64


@ours_only
def test_io_arguments_are_named_and_paths_may_be_bytes(tmp_path):
    from loaderx.io import load_npy, loadtxt, npy_header
    path = tmp_path / "a.dat"
    path.write_text("1,2\n3,4\n")
    with pytest.raises(TypeError, match="delimiter must be a single ASCII character, got int 44"):
        loadtxt(path, delimiter=44)
    with pytest.raises(ValueError, match="usecols entry 1180591620717411303424 is out of range"):
        loadtxt(path, delimiter=",", usecols=[2**70])
    want = [[1, 2], [3, 4]]
    np.testing.assert_array_equal(loadtxt(path, delimiter=",", max_rows=2**70), want)
    np.testing.assert_array_equal(loadtxt(path, delimiter=",", chunk_size=2**62), want)
    np.testing.assert_array_equal(loadtxt(os.fsencode(path), delimiter=","), want)
    np.save(tmp_path / "b.npy", np.arange(3))
    np.testing.assert_array_equal(load_npy(os.fsencode(tmp_path / "b.npy")), np.arange(3))
    assert npy_header(os.fsencode(tmp_path / "b.npy"))["shape"] == (3,)


@ours_only
def test_a_truncated_npy_payload_says_so(tmp_path):
    from loaderx.io import load_npy, load_npy_prefix
    np.save(tmp_path / "t.npy", np.zeros((6, 4), np.float32))
    raw = (tmp_path / "t.npy").read_bytes()
    (tmp_path / "t.npy").write_bytes(raw[:-10])
    for f in (lambda: load_npy(tmp_path / "t.npy"), lambda: load_npy_prefix(tmp_path / "t.npy", 6)):
        with pytest.raises(ValueError, match=r"t\.npy: the payload is truncated: the header "
                                             r"promises 96 bytes after offset 128, the file "
                                             r"holds 86 there"):
            f()


@ours_only
def test_an_npy_payload_larger_than_memory_is_a_memory_error(tmp_path):
    """Under an address-space limit, a 32 GiB payload (a sparse file) is a
    MemoryError naming the file, not a panic."""
    import struct
    import subprocess
    import sys
    p = tmp_path / "big.npy"
    h = b"{'descr': '<f4', 'fortran_order': False, 'shape': (2147483648, 4), }"
    h += b" " * ((-(10 + len(h) + 1)) % 64) + b"\n"
    with open(p, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h)
        f.truncate(10 + len(h) + 2147483648 * 16)
    code = f"""
import resource
resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
from loaderx.io import load_npy
try:
    load_npy({str(p)!r})
except MemoryError as e:
    print("MemoryError:", e)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "RAYON_NUM_THREADS": "1"})
    assert "MemoryError:" in out.stdout and "big.npy: cannot allocate 32.0 GiB" in out.stdout, \
        out.stdout + out.stderr


def _npy_with_header(path, dict_text, payload=b""):
    body = dict_text.encode("latin1")
    body += b" " * ((-(10 + len(body) + 1)) % 64) + b"\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little")
                     + body + payload)
    return path


def test_a_shape_numpy_cannot_build_is_a_header_error_naming_the_file(tmp_path):
    # Regression: (0, 2**62, 4) has no elements, so the header passed, but
    # NumPy cannot build the array: load_npy failed inside np.ndarray with
    # "array is too big" and no file name, and npy_header called it valid.
    from loaderx.io import load_npy, load_npy_prefix, npy_header
    p = _npy_with_header(
        tmp_path / "big.npy",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (0, 4611686018427387904, 4), }")
    with pytest.raises(ValueError):
        np.load(p)
    for f in (npy_header, load_npy, lambda q: load_npy_prefix(q, 0)):
        with pytest.raises(ValueError, match=r"big\.npy.*overflows"):
            f(p)


def test_npy_readers_on_a_directory_or_a_nul_path_raise_what_loadtxt_does(tmp_path):
    # Regression: a directory gave a StoreIOError without errno (np.load and
    # loaderx.io.loadtxt raise IsADirectoryError), and a NUL in the path
    # made load_npy raise os.stat's bare "embedded null byte", naming no
    # file, where npy_header named it.
    from loaderx.io import load_npy, load_npy_prefix, loadtxt, npy_header
    for f in (npy_header, load_npy, lambda p: load_npy_prefix(p, 0), loadtxt):
        with pytest.raises(IsADirectoryError) as e:
            f(tmp_path)
        assert e.value.errno == errno.EISDIR and e.value.filename == str(tmp_path)
    bad = str(tmp_path / "a\0b.npy")
    for f in (npy_header, load_npy, lambda p: load_npy_prefix(p, 0)):
        with pytest.raises(OSError, match=r"a\x00b\.npy: file name contained"):
            f(bad)


def _numpy_or_error(path, **kw):
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return np.loadtxt(path, ndmin=2, encoding="utf-8", **kw)
        except ValueError:
            return None


@pytest.mark.parametrize("text,kw", [
    # With a delimiter a line of blanks is a row of one blank field.
    ("1,2\n   \n3,4\n", {"delimiter": ","}),
    ("1,2\n  # note\n3,4\n", {"delimiter": ","}),
    ("1\n \t\n3\n", {"delimiter": ","}),
    ("1,2\n3,4\n  ", {"delimiter": ","}),
    ("1,2\n\u00a0\n3,4\n", {"delimiter": ","}),
    ("1;2\n \n3;4\n", {"delimiter": ";", "usecols": [0]}),
    # ... an empty line, a CRLF one, a comment line are skipped.
    ("1,2\n\n3,4\r\n\r\n# c\n5,6\n", {"delimiter": ","}),
    ("1 2\n \t \n3 4\n   # c\n", {}),
    # Unicode whitespace splits fields, and is stripped around them.
    ("1\u00a02\n3\u30004\n", {}),
    ("\u20091\u2003 2\u202f\n\u3000\n3\x1c4\x1f\n\u00a0# c\n", {}),
    ("1\u20282\u20293\n4\u16805\u205f6\n", {}),
    ("1,\u00a02\u3000\n3\u2002,4\n", {"delimiter": ","}),
    ("1\u00a02\u00a05\n3 4 6\n", {"usecols": [2, 0]}),
    ("1 2\n\u3000\n3 4\n5 6\n", {"max_rows": 2}),
    # Not whitespace: part of the token, an error in both.
    ("1\u200b2\n", {}),
    ("1\u00a02,3\n", {"delimiter": ","}),
    # No data rows: as many columns as usecols names.
    ("", {"usecols": [0, 1]}),
    ("# c\n\n", {"usecols": [-1, 0, 0], "delimiter": ","}),
    ("", {"usecols": []}),
])
def test_loadtxt_blanks_and_unicode_whitespace_as_numpy(tmp_path, text, kw):
    from loaderx.io import loadtxt
    path = tmp_path / "t.txt"
    path.write_text(text, encoding="utf-8", newline="")
    want = _numpy_or_error(path, **kw)
    for threads, chunk in ((1, 500), (2, 0)):
        if want is None:
            with pytest.raises(ValueError):
                loadtxt(path, num_threads=threads, chunk_size=chunk, **kw)
        else:
            got = loadtxt(path, num_threads=threads, chunk_size=chunk, **kw)
            assert got.shape == want.shape
            np.testing.assert_array_equal(got, want)


def test_loadtxt_max_rows_zero_keeps_the_column_count(tmp_path):
    # Kept, documented difference: numpy treats max_rows=0 as "no data"
    # ((0, 1) with ndmin=2, (0,) without, and a warning); ours is the first
    # max_rows=0 rows of the file: (0, columns), as max_rows=k gives (k, columns).
    from loaderx.io import loadtxt
    path = tmp_path / "m.txt"
    path.write_text("1 2 3\n4 5 6\n")
    assert loadtxt(path, max_rows=0).shape == (0, 3)
    assert loadtxt(path, max_rows=0, usecols=[0, 0]).shape == (0, 2)
    with pytest.warns(UserWarning):
        assert np.loadtxt(path, max_rows=0, ndmin=2).shape == (0, 1)
    # A file without data rows: (0, 0) (numpy with ndmin=2: (0, 1)).
    empty = tmp_path / "e.txt"
    empty.write_text("# nothing\n")
    assert loadtxt(empty).shape == (0, 0)


def test_npy_shape_as_a_list_is_refused_as_numpy_refuses_it(tmp_path):
    import io
    from loaderx.io import load_npy, npy_header
    for shape, ok in (("(2,)", True), ("[2]", False), ("([2])", False)):
        h = f"{{'descr': '<f8', 'fortran_order': False, 'shape': {shape}, }}".encode()
        h += b" " * (63 - (10 + len(h)) % 64) + b"\n"
        data = b"\x93NUMPY\x01\x00" + len(h).to_bytes(2, "little") + h + bytes(16)
        path = tmp_path / "l.npy"
        path.write_bytes(data)
        if ok:
            assert npy_header(path)["shape"] == (2,)
            np.testing.assert_array_equal(load_npy(path), np.load(io.BytesIO(data)))
            continue
        with pytest.raises(ValueError, match="shape is not valid"):
            np.load(io.BytesIO(data))
        with pytest.raises(ValueError, match="is a list, not a tuple"):
            npy_header(path)
        with pytest.raises(ValueError, match="is a list, not a tuple"):
            load_npy(path)
