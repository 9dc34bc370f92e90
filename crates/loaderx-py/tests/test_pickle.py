"""Pickling stores, for worker processes that do not fork: a PyTorch
``DataLoader``'s workers under ``spawn`` or ``forkserver`` (Linux's default
start method from Python 3.14) receive the dataset, and so its store,
pickled. A read-only store pickles as its path and opens again, read-only,
where it is unpickled; a read-write one refuses with a ``TypeError`` that
says what to do (loaderx 1.7.2 raised ``TypeError: cannot pickle
'_cffi_backend._CDataBase' object`` for both, as ours did before)."""

import copy
import multiprocessing
import os
import pickle

import numpy as np
import pytest

from loaderx.zrecord import DenseStore, RaggedStore

from conftest import ours_only

pytestmark = ours_only


def _write(kind, path):
    rec = np.arange(12, dtype=np.float32).reshape(4, 3)
    if kind == "dense":
        with DenseStore(path, np.float32, (3,)) as s:
            s.append(rec)
    else:
        with RaggedStore(path, np.float32) as s:
            s.append([rec[0], rec[1, :2], rec[2, :1], rec[3]])
    return rec


def _open_ro(kind, path):
    cls = DenseStore if kind == "dense" else RaggedStore
    return cls(path, read_only=True)


def _records(store, idx):
    got = store[idx]
    return [np.asarray(r) for r in got]


@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_a_read_only_store_pickles_and_reopens_read_only(kind, tmp_path):
    _write(kind, "s")
    ro = _open_ro(kind, "s")
    data = pickle.dumps(ro)
    # Unpickled after a change of directory: the path was made absolute.
    os.chdir(tmp_path.parent)
    back = pickle.loads(data)
    assert type(back) is type(ro)
    assert back.read_only
    assert back.path == tmp_path / "s"
    assert len(back) == len(ro) == 4
    assert back.dtype == ro.dtype and back.codec == ro.codec
    for a, b in zip(_records(back, [3, 0, 2]), _records(ro, [3, 0, 2])):
        np.testing.assert_array_equal(a, b)
    # Its own handle: closing one leaves the other open.
    ro.close()
    assert len(back) == 4
    back.close()


def test_a_pickled_store_reopens_the_store_its_path_named_through_a_symlink(tmp_path):
    """Regression: the path was made absolute with ``os.path.abspath``,
    which drops ``link/..`` as text, where the system follows ``link``
    first: a store opened as ``link/../s`` (``link`` pointing into another
    directory) was reopened, unpickled, as the ``s`` beside ``link``,
    another store or none."""
    (tmp_path / "real" / "sub").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real" / "sub")
    with DenseStore(tmp_path / "real" / "s", np.int64, ()) as s:
        s.append(np.array([1, 2, 3], dtype=np.int64))
    with DenseStore(tmp_path / "s", np.int64, ()) as s:  # the decoy
        s.append(np.array([7], dtype=np.int64))
    ro = DenseStore("link/../s", read_only=True)
    assert len(ro) == 3
    back = pickle.loads(pickle.dumps(ro))
    assert len(back) == 3
    np.testing.assert_array_equal(back[[0, 1, 2]], [1, 2, 3])
    back.close()
    ro.close()


@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_a_read_write_or_closed_store_refuses_to_pickle_saying_why(kind):
    _write(kind, "s")
    cls = DenseStore if kind == "dense" else RaggedStore
    rw = cls("s")
    with pytest.raises(TypeError, match="read_only=True"):
        pickle.dumps(rw)
    with pytest.raises(TypeError, match="read_only=True"):
        copy.deepcopy(rw)
    rw.close()
    ro = _open_ro(kind, "s")
    ro.close()
    with pytest.raises(TypeError, match="closed"):
        pickle.dumps(ro)


def test_copy_still_shares_the_handle_and_deepcopy_opens_another():
    from loaderx.zrecord import StoreClosed  # ours only

    _write("dense", "s")
    ro = _open_ro("dense", "s")
    shallow = copy.copy(ro)
    deep = copy.deepcopy(ro)
    shallow.close()  # the shared handle
    with pytest.raises(StoreClosed):
        len(ro)
    assert len(deep) == 4
    deep.close()


def _child_sum(store):
    return float(np.sum(store[np.arange(len(store))]))


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_worker_processes_that_do_not_fork_read_a_pickled_store(method):
    rec = _write("dense", "s")
    ro = _open_ro("dense", "s")
    ctx = multiprocessing.get_context(method)
    with ctx.Pool(2) as pool:
        sums = pool.map(_child_sum, [ro, ro, ro])
    assert sums == [float(rec.sum())] * 3
    # The children's handles are gone: a writer can take the store again.
    ro.close()
    with DenseStore("s") as rw:
        rw.append(rec[:1])
        assert len(rw) == 5
