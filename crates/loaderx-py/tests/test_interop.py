"""Store interop with loaderx 1.7.2, both ways: a store written by one
package is read bit-exactly (dtype, shape, bytes) by the other, for every
codec and both kinds. The reference runs in its own venv, in a subprocess."""

import numpy as np
import pytest

from loaderx.utils import train_dict
from loaderx.zrecord import DenseStore, RaggedStore

from conftest import run_ref, structured_dtype

CODECS = ["raw", "zstd", "zstd_dict"]

# Writes the same stores as `write_ours` below, with the reference package.
REF_WRITE = r'''
import sys, numpy as np
from loaderx.zrecord import DenseStore, RaggedStore
from loaderx.utils import train_dict
root, codec = sys.argv[1], sys.argv[2]
dense = np.load(root + "/dense.npy")
struct = np.load(root + "/struct.npy")
z = np.load(root + "/ragged.npz")
ragged = [z[f"r{i}"] for i in range(len(z.files))]
def kw(src):
    return {"codec": codec, "dict_bytes": train_dict(src, tier="fast")} if codec == "zstd_dict" else {"codec": codec}
with DenseStore(root + "/dense", dense.dtype, dense.shape[1:], **kw(dense)) as s:
    s.append(dense[:50]); s.append(dense[50:])
with DenseStore(root + "/struct", struct.dtype, struct.shape[1:], **kw(struct)) as s:
    s.append(struct)
with RaggedStore(root + "/ragged", ragged[0].dtype, **kw(ragged)) as s:
    s.append(ragged)
print("written")
'''

# Reads the stores with the reference package and checks them bit-exactly.
REF_READ = r'''
import sys, numpy as np
from loaderx.zrecord import DenseStore, RaggedStore
root, codec = sys.argv[1], sys.argv[2]
dense = np.load(root + "/dense.npy")
struct = np.load(root + "/struct.npy")
z = np.load(root + "/ragged.npz")
ragged = [z[f"r{i}"] for i in range(len(z.files))]
with DenseStore(root + "/dense") as s:
    assert s.codec == codec and s.has_dict() == (codec == "zstd_dict")
    assert s.dtype.str == dense.dtype.str and s.item_shape == dense.shape[1:]
    got = s[:]
    assert got.dtype == dense.dtype and got.tobytes() == dense.tobytes()
    idx = np.random.default_rng(0).integers(0, len(dense), 64)
    assert s[idx].tobytes() == dense[idx].tobytes()
with DenseStore(root + "/struct") as s:
    assert s.dtype == struct.dtype and s.dtype.descr == struct.dtype.descr
    assert s[:].tobytes() == struct.tobytes()
with RaggedStore(root + "/ragged") as s:
    got = s[:]
    assert len(got) == len(ragged)
    for g, w in zip(got, ragged):
        assert g.dtype.str == w.dtype.str and g.shape == w.shape and g.tobytes() == w.tobytes()
print("verified")
'''


def make_data(root):
    rng = np.random.default_rng(42)
    base = rng.integers(0, 60, size=(1, 24, 16)).astype("<f4")
    dense = np.repeat(base, 120, axis=0) + rng.integers(0, 3, size=(120, 24, 16)).astype("<f4")
    struct = np.zeros(80, structured_dtype())
    struct["x"] = rng.random(80)
    struct["id"] = np.arange(80) * 3
    struct["pos"] = rng.integers(-5, 5, size=(80, 3))
    struct["inner"]["b"] = rng.random(80)
    ragged = []
    for i in range(150):
        rank = i % 3
        shape = tuple(int(d) for d in rng.integers(1, 12, size=rank))
        ragged.append(np.array(rng.integers(0, 40, size=shape) * 1000, dtype=">i4"))
    np.save(root / "dense.npy", dense)
    np.save(root / "struct.npy", struct)
    np.savez(root / "ragged.npz", **{f"r{i}": r for i, r in enumerate(ragged)})
    return dense, struct, ragged


def kw(codec, src):
    if codec == "zstd_dict":
        return {"codec": codec, "dict_bytes": train_dict(src, tier="fast")}
    return {"codec": codec}


def write_ours(root, codec, dense, struct, ragged):
    with DenseStore(root / "dense", dense.dtype, dense.shape[1:], **kw(codec, dense)) as s:
        s.append(dense[:50])
        s.append(dense[50:])
    with DenseStore(root / "struct", struct.dtype, struct.shape[1:], **kw(codec, struct)) as s:
        s.append(struct)
    with RaggedStore(root / "ragged", ragged[0].dtype, **kw(codec, ragged)) as s:
        s.append(ragged)


def read_ours(root, codec, dense, struct, ragged):
    with DenseStore(root / "dense") as s:
        assert s.codec == codec and s.has_dict() == (codec == "zstd_dict")
        assert s.dtype.str == dense.dtype.str and s.item_shape == dense.shape[1:]
        assert s[:].tobytes() == dense.tobytes()
        idx = np.random.default_rng(0).integers(0, len(dense), 64)
        assert s[idx].tobytes() == dense[idx].tobytes()
    with DenseStore(root / "struct") as s:
        assert s.dtype == struct.dtype and s.dtype.descr == struct.dtype.descr
        assert s[:].tobytes() == struct.tobytes()
    with RaggedStore(root / "ragged") as s:
        got = s[:]
        assert len(got) == len(ragged)
        for g, w in zip(got, ragged):
            assert g.dtype.str == w.dtype.str and g.shape == w.shape
            assert g.tobytes() == w.tobytes()


@pytest.mark.parametrize("codec", CODECS)
def test_ours_written_reference_reads(codec, tmp_path, ref_python):
    data = make_data(tmp_path)
    write_ours(tmp_path, codec, *data)
    assert "verified" in run_ref(ref_python, REF_READ, tmp_path, codec)


@pytest.mark.parametrize("codec", CODECS)
def test_reference_written_ours_reads(codec, tmp_path, ref_python):
    data = make_data(tmp_path)
    assert "written" in run_ref(ref_python, REF_WRITE, tmp_path, codec)
    read_ours(tmp_path, codec, *data)
    # and we can keep appending to, deleting from and compacting its store
    dense = data[0]
    with DenseStore(tmp_path / "dense") as s:
        s.append(dense[:10])
        s.delete([0])
        s.compact()
        assert len(s) == 129
    with DenseStore(tmp_path / "dense", read_only=False) as s:
        assert sorted(r.tobytes() for r in s[:]) == sorted(
            r.tobytes() for r in np.concatenate([dense, dense[:10]])[1:])


def test_type_identity_files_are_byte_identical(tmp_path, ref_python):
    """``store.zr`` (typed header + msgpack identity) is the same file,
    whichever package created the store."""
    data = make_data(tmp_path)
    (tmp_path / "ref").mkdir()
    for name in ("dense.npy", "struct.npy", "ragged.npz"):
        (tmp_path / "ref" / name).write_bytes((tmp_path / name).read_bytes())
    run_ref(ref_python, REF_WRITE, tmp_path / "ref", "raw")
    write_ours(tmp_path, "raw", *data)
    for store in ("dense", "struct", "ragged"):
        ours = (tmp_path / store / "store.zr").read_bytes()
        ref = (tmp_path / "ref" / store / "store.zr").read_bytes()
        assert ours == ref, store


# Titled structured fields: descr keys ``(title, name)``, stored in the
# identity as ``[title, name]`` lists. `TITLED_DTYPE` is evaluated in both
# interpreters.
TITLED_DTYPE = ("np.dtype([(('Position', 'x'), '<f4'), ('y', 'u1'), "
                "(('Pair', 'p'), '>i2', (2,)), ('z', [(('Big', 'a'), '>u8'), ('b', '?')])])")

TITLED_WRITE = r'''
import sys, numpy as np
from loaderx.zrecord import DenseStore, RaggedStore
from loaderx.utils import train_dict
root, codec = sys.argv[1], sys.argv[2]
dt = %s
data = np.load(root + "/titled.npy")
assert data.dtype == dt
kw = {"codec": codec, "dict_bytes": train_dict(data, tier="fast")} if codec == "zstd_dict" else {"codec": codec}
with DenseStore(root + "/tdense", dt, data.shape[1:], **kw) as s:
    s.append(data[:7]); s.append(data[7:])
with RaggedStore(root + "/tragged", dt, **kw) as s:
    s.append([data[i, : 1 + i %% 3] for i in range(len(data))])
print("written")
''' % TITLED_DTYPE

TITLED_READ = r'''
import sys, numpy as np
from loaderx.zrecord import DenseStore, RaggedStore
root, codec = sys.argv[1], sys.argv[2]
dt = %s
data = np.load(root + "/titled.npy")
with DenseStore(root + "/tdense") as s:
    assert s.codec == codec and s.dtype == dt and s.item_shape == data.shape[1:]
    assert s[:].tobytes() == data.tobytes()
    assert (s[[3]]["Position"] == data[[3]]["x"]).all()
with RaggedStore(root + "/tragged") as s:
    assert s.dtype == dt
    for i, g in enumerate(s[:]):
        w = data[i, : 1 + i %% 3]
        assert g.dtype == dt and g.shape == w.shape and g.tobytes() == w.tobytes()
print("verified")
''' % TITLED_DTYPE


def make_titled(root):
    dt = eval(TITLED_DTYPE)
    rng = np.random.default_rng(5)
    data = np.zeros((20, 3), dt)
    data["x"] = rng.random((20, 3))
    data["y"] = rng.integers(0, 255, (20, 3))
    data["Pair"] = rng.integers(-900, 900, (20, 3, 2))
    data["z"]["Big"] = 2**40 + rng.integers(0, 99, (20, 3))
    data["z"]["b"] = rng.random((20, 3)) > 0.5
    np.save(root / "titled.npy", data)
    return data


def write_titled_ours(root, codec, data):
    dt = data.dtype
    with DenseStore(root / "tdense", dt, data.shape[1:], **kw(codec, data)) as s:
        s.append(data[:7])
        s.append(data[7:])
    with RaggedStore(root / "tragged", dt, **kw(codec, data)) as s:
        s.append([data[i, : 1 + i % 3] for i in range(len(data))])


def read_titled_ours(root, codec, data):
    with DenseStore(root / "tdense") as s:
        assert s.codec == codec and s.dtype == data.dtype
        assert s.dtype.descr == data.dtype.descr and s.item_shape == data.shape[1:]
        assert s[:].tobytes() == data.tobytes()
        np.testing.assert_array_equal(s[[3]]["Position"], data[[3]]["x"])
    with RaggedStore(root / "tragged") as s:
        assert s.dtype == data.dtype
        for i, g in enumerate(s[:]):
            w = data[i, : 1 + i % 3]
            assert g.dtype == data.dtype and g.shape == w.shape and g.tobytes() == w.tobytes()


@pytest.mark.parametrize("codec", CODECS)
def test_reference_written_titled_store_ours_reads(codec, tmp_path, ref_python):
    """Ours refused titled fields, so these stores did not even open
    (InvalidStore)."""
    data = make_titled(tmp_path)
    assert "written" in run_ref(ref_python, TITLED_WRITE, tmp_path, codec)
    read_titled_ours(tmp_path, codec, data)


@pytest.mark.parametrize("codec", CODECS)
def test_ours_written_titled_store_reference_reads(codec, tmp_path, ref_python):
    data = make_titled(tmp_path)
    write_titled_ours(tmp_path, codec, data)
    assert "verified" in run_ref(ref_python, TITLED_READ, tmp_path, codec)


def test_titled_type_identity_files_are_byte_identical(tmp_path, ref_python):
    data = make_titled(tmp_path)
    (tmp_path / "ref").mkdir()
    (tmp_path / "ref" / "titled.npy").write_bytes((tmp_path / "titled.npy").read_bytes())
    run_ref(ref_python, TITLED_WRITE, tmp_path / "ref", "raw")
    write_titled_ours(tmp_path, "raw", data)
    for store in ("tdense", "tragged"):
        ours = (tmp_path / store / "store.zr").read_bytes()
        ref = (tmp_path / "ref" / store / "store.zr").read_bytes()
        assert ours == ref, store
