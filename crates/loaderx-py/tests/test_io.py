"""loaderx.io: parallel loadtxt (fast_loadtxt's signature) and the .npy
readers, checked against numpy's own loadtxt / load on the same files."""

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
