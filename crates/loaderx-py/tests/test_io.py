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
