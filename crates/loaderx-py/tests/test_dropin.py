"""Behaviour a differential test against loaderx 1.7.2 found to differ
(random call sequences run in both packages, results and exception types
compared). Every test here runs on both packages
(``LOADERX_SUITE=ref <ref python> -m pytest tests`` runs them on the
reference), so they pin the reference's behaviour, not ours alone."""

import copy
import gc
import warnings

import numpy as np
import pytest

from loaderx.dataloader import DataLoader
from loaderx.zrecord import DenseStore, RaggedStore
from loaderx.zsampler import Sampler

from conftest import ours_only


def test_next_on_a_temporary_loader_returns_its_batch():
    """Ours closed a loader with no other reference in the middle of its own
    ``__next__`` ("the DataLoader is closed")."""
    # The store is left open: loaderx 1.7.2's loader threads outlive a
    # temporary loader (they hold it), and closing the store under its
    # gather thread hung the reference's suite once.
    ds = DenseStore("d", np.int32, (2,))
    ds.append(np.arange(12, dtype=np.int32).reshape(6, 2))
    batch = DataLoader({"a": ds}, batch_size=3, mode=0).__next__()
    np.testing.assert_array_equal(batch["a"], np.arange(6, dtype=np.int32).reshape(3, 2))


def test_a_memoryview_record_is_an_array_of_its_own_format():
    """A memoryview keeps its format and shape, as ``np.asarray`` reads
    it: ours took every memoryview as raw bytes, so a uint16 view went
    into a uint8 store as twice the bytes, and a float32 view was refused by
    a float32 store."""
    with RaggedStore("f", np.float32) as rs:
        rs.append([memoryview(np.ones((2, 3), np.float32))])
        got = rs[0]
        assert got.shape == (2, 3) and got.dtype == np.float32
    with RaggedStore("u", np.uint8) as rs:
        with pytest.raises(ValueError):
            rs.append([memoryview(np.arange(3, dtype=np.uint16))])
        assert len(rs) == 0


@pytest.mark.parametrize("codec", ["", 0, False])
def test_a_falsy_codec_creates_the_default_and_does_not_match_on_reopen(codec):
    with DenseStore("d", np.uint8, (4,), codec=codec) as ds:
        assert ds.codec == "zstd"
        ds.append(np.zeros((1, 4), np.uint8))
    with pytest.raises(ValueError):
        DenseStore("d", codec=codec)
    with DenseStore("d", codec="zstd") as ds:
        assert len(ds) == 1


@pytest.mark.parametrize("idx", [None, "a", object(), (slice(None), 0)],
                         ids=["None", "str", "object", "tuple-with-slice"])
def test_an_object_that_is_no_index_is_a_type_error(idx):
    with DenseStore("d", np.uint8, (4,)) as ds:
        ds.append(np.zeros((3, 4), np.uint8))
        with pytest.raises(TypeError):
            ds[idx]


@ours_only
def test_a_complex_index_is_refused_not_cast():
    """loaderx 1.7.2 casts ``1j`` to 0 with a ComplexWarning; ours refuses
    it (stricter), with the same exception types as any other non-index."""
    from loaderx.zrecord import InvalidIndex
    with DenseStore("d", np.uint8, (4,)) as ds:
        ds.append(np.zeros((3, 4), np.uint8))
        for idx in (1j, np.array([1 + 0j]), [None]):
            with pytest.raises(InvalidIndex) as info:
                ds[idx]
            assert isinstance(info.value, TypeError) and isinstance(info.value, IndexError)


@ours_only
@pytest.mark.parametrize("idx", [np.timedelta64(1), np.timedelta64(1, "s"), np.timedelta64(-1, "ns"),
                                 np.timedelta64("NaT"), np.array([np.timedelta64(1)], dtype=object)],
                         ids=["generic", "seconds", "negative-ns", "NaT", "object-array"])
def test_a_timedelta64_scalar_is_refused_like_a_timedelta64_array(idx):
    """A ``timedelta64`` is a ``np.signedinteger``: a scalar went down the
    integer path, where ``np.timedelta64(1)`` read record 1 and
    ``np.timedelta64(1, 's')`` failed in ``int()`` with a bare
    ``TypeError`` (difftest session 14), while a ``timedelta64`` index
    array is refused (``InvalidIndex``, documented; loaderx 1.7.2 casts
    both). Every form is refused now, by every method that takes an index,
    and nothing is deleted."""
    from loaderx.zrecord import InvalidIndex
    with DenseStore("d", np.int32, ()) as ds:
        ds.append(np.arange(10, dtype=np.int32))
        for call in (ds.__getitem__, ds.__getitems__, ds.delete,
                     lambda i: ds.gather_into(i, np.empty((), np.int32))):
            with pytest.raises(InvalidIndex, match="timedelta64"):
                call(idx)
        assert len(ds) == 10
    with RaggedStore("r", np.int32) as rs:
        rs.append([np.arange(3, dtype=np.int32)] * 3)
        with pytest.raises(InvalidIndex, match="timedelta64"):
            rs[idx]


def test_a_bool_is_not_a_batch_size():
    with pytest.raises(TypeError):
        Sampler(10, True, 0)


def test_a_bool_mode_length_or_seed_is_taken_as_an_int():
    """Only batch_size refuses a bool in loaderx 1.7.2 (ours refused all
    of them for a while)."""
    assert len(Sampler(4, 2, True, seed=False).next()) == 2
    assert list(Sampler(True, 1, 0).next()) == [0]
    assert list(Sampler(np.True_, 1, np.False_, seed=np.True_).next()) == [0]
    with pytest.raises(TypeError):
        Sampler(4, np.True_, 0)


@pytest.mark.parametrize("shape", ["ab", ["a", "b"]], ids=["str", "str-entries"])
def test_an_item_shape_of_letters_is_a_value_error(shape):
    """loaderx 1.7.2 runs ``int()`` over the entries (a ``ValueError``);
    ours refuses strings before that, with an error that is both a
    ``TypeError`` and that ``ValueError``."""
    with pytest.raises(ValueError):
        DenseStore("d", np.float32, shape, codec="raw")


def test_train_dict_on_an_empty_array_is_an_index_error():
    """loaderx 1.7.2 indexed the empty array's first row (an ``IndexError``);
    ours says the array is empty, in an error that is also that type."""
    from loaderx.utils import train_dict
    with pytest.raises(IndexError):
        train_dict(np.zeros((0, 4), np.float32))


def titled_dtype():
    """A title on a plain field, on a subarray field and inside a nested
    structured field (``descr`` keys ``(title, name)``)."""
    return np.dtype([(("Position", "x"), "<f4"), ("y", "u1"),
                     (("Pair", "p"), "<i2", (2,)),
                     ("z", [(("Big", "a"), ">u8"), ("b", "?")])])


def test_a_titled_dtype_is_stored_and_reopens_with_its_titles():
    """Ours refused titled structured fields everywhere, so a store the
    reference wrote with one could not even be opened. Field titles are
    part of the dtype (NumPy's ``==`` compares them): they survive a
    reopen, and a field is found by its name and by its title."""
    dt = titled_dtype()
    a = np.zeros((5, 2), dt)
    a["x"] = np.arange(10).reshape(5, 2)
    a["y"] = 3
    a["Pair"] = np.arange(20).reshape(5, 2, 2)
    a["z"]["Big"] = 2**40 + np.arange(10).reshape(5, 2)
    with DenseStore("d", dt, (2,)) as ds:
        ds.append(a[:2])
        ds.append(a[2:])
        assert ds.dtype == dt
    with RaggedStore("r", dt) as rs:
        rs.append([a[0], a[1:4].reshape(-1), a[4, :1]])
    with DenseStore("d") as ds:
        assert ds.dtype == dt and ds.dtype.descr == dt.descr
        got = ds[[4, 0, 2]]
        assert got.dtype == dt and got.tobytes() == a[[4, 0, 2]].tobytes()
        np.testing.assert_array_equal(got["Position"], a["x"][[4, 0, 2]])
        np.testing.assert_array_equal(got["p"], a["Pair"][[4, 0, 2]])
        np.testing.assert_array_equal(ds[1]["z"]["Big"], a[1]["z"]["a"])
    with RaggedStore("r") as rs:
        assert rs.dtype == dt
        got = rs[:]
        assert [g.shape for g in got] == [(2,), (6,), (1,)]
        assert got[1].dtype == dt and got[1].tobytes() == a[1:4].reshape(-1).tobytes()
        np.testing.assert_array_equal(got[2]["Position"], a[4, :1]["x"])
    # The titles are part of the stored dtype: without them it is another one.
    untitled = np.dtype([("x", "<f4"), ("y", "u1"), ("p", "<i2", (2,)),
                         ("z", [("a", ">u8"), ("b", "?")])])
    with pytest.raises(ValueError):
        DenseStore("d", untitled, (2,))
    with pytest.raises(ValueError):
        RaggedStore("r", untitled)


@ours_only
def test_a_title_that_is_not_a_string_is_refused_naming_the_field():
    """NumPy accepts any object as a title; only strings are stored here
    (the reference would store an integer title as a msgpack integer)."""
    from loaderx.zrecord import UnsupportedDType

    with pytest.raises(UnsupportedDType, match=r'field "x": title 1 is not a string'):
        DenseStore("n", np.dtype([((1, "x"), "<f4")]), (2,))


def test_zrecord_error_requires_its_code():
    """``ZrecordError()`` was accepted here, as a code -2 "file I/O
    failed" error that nothing had reported; loaderx 1.7.2 requires the
    code (a ``TypeError``)."""
    from loaderx.zrecord import ZrecordError

    with pytest.raises(TypeError):
        ZrecordError()
    e = ZrecordError(-3)
    assert e.code == -3 and str(e) == "index out of range"


@ours_only
def test_a_zrecord_error_subclass_defaults_to_its_own_code():
    from loaderx.zrecord import IndexOutOfRange, StoreClosed

    assert IndexOutOfRange().code == -3 and str(IndexOutOfRange()) == "index out of range"
    assert StoreClosed().code == -16


@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_a_shallow_copy_going_away_leaves_the_store_open(kind):
    """``copy.copy(store)`` shares the open handle, as in loaderx 1.7.2;
    ours closed it when the copy was collected (the store object's
    ``__del__`` closed the shared handle), so the original raised
    ``StoreClosed`` on its next call."""
    rec = np.arange(6, dtype=np.float32).reshape(2, 3)
    store = DenseStore("s", np.float32, (3,)) if kind == "dense" else RaggedStore("s", np.float32)
    store.append(rec if kind == "dense" else list(rec))
    dup = copy.copy(store)
    assert len(dup) == 2
    del dup
    gc.collect()
    assert len(store) == 2
    np.testing.assert_array_equal(np.stack(list(store[[1, 0]])), rec[[1, 0]])
    store.append(rec if kind == "dense" else list(rec))
    store.close()
    # Released with the last holder: the store opens again.
    again = DenseStore("s") if kind == "dense" else RaggedStore("s")
    assert len(again) == 4
    again.close()


@ours_only
def test_closing_a_shallow_copy_closes_the_shared_handle():
    """One handle, as in the reference; here the original then raises
    ``StoreClosed`` (the reference would call into a freed handle)."""
    from loaderx.zrecord import StoreClosed

    ds = DenseStore("d", np.uint8, (2,))
    ds.append(np.zeros((1, 2), np.uint8))
    copy.copy(ds).close()
    with pytest.raises(StoreClosed):
        len(ds)
    assert len(DenseStore("d")) == 1


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_a_float_index_array_reads_without_a_warning(dtype):
    """Session 13: a float16 index array raised NumPy's "overflow
    encountered in cast" RuntimeWarning here (an error under ``-W
    error``): the range check compared it with the Python float 2**63,
    which NumPy 2 casts to float16. The reference reads it silently."""
    with DenseStore("d", np.int32, ()) as ds:
        ds.append(np.arange(10, dtype=np.int32))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            np.testing.assert_array_equal(ds[np.array([1, 2], dtype)], [1, 2])
            ds.delete(np.array([0], dtype))
        assert len(ds) == 9


@ours_only
def test_one_transform_worker_sees_the_batches_in_step_order():
    """loaderx 1.7.2 has one gather thread, so with ``num_workers=1`` its
    transform is called on step 0, 1, 2, ... in turn. Ours gathers on two
    threads, and the transform took batches as their gathers finished: a
    stateful transform's fourth call was not step 3 (difftest session 14:
    one failing on its fourth call raised after a different batch than in
    the reference), so an augmentation drawing from a global RNG did not
    reproduce. ``allocate`` holds up the first gather, so the other thread
    runs ahead."""
    import threading
    import time
    ds = DenseStore("d", np.int64, (1,))
    ds.append(np.arange(32, dtype=np.int64).reshape(32, 1))
    first = [True]
    lock = threading.Lock()

    def allocate(name, shape, dtype):
        with lock:
            slow, first[0] = first[0], False
        if slow:
            time.sleep(0.3)
        return np.empty(shape, dtype)

    seen = []

    def transform(batch):
        seen.append(int(batch["a"][0, 0]))
        return batch

    with DataLoader({"a": ds}, num_workers=1, batch_size=2, mode=0, transform=transform,
                    allocate=allocate) as loader:
        got = [int(next(loader)["a"][0, 0]) for _ in range(6)]
    assert got == [0, 2, 4, 6, 8, 10]
    assert seen[:6] == [0, 2, 4, 6, 8, 10]


def test_a_subclass_getitems_override_serves_one_integer_index():
    """loaderx 1.7.2 reads ``ds[i]`` as ``self.__getitems__([i])[0]``, so a
    subclass that overrides ``__getitems__`` (a wrapper decoding or
    augmenting records) sees its override for one integer index, and so in
    iteration, too. Ours read one record on a path of its own and returned
    the stored record (difftest session 15)."""

    class Doubled(DenseStore):
        def __getitems__(self, idxs):
            return super().__getitems__(idxs) * 2

    class Shifted(RaggedStore):
        def __getitems__(self, idxs):
            return [r + 1 for r in super().__getitems__(idxs)]

    class Deeper(Doubled):  # inherits the override
        pass

    with Doubled("d", np.int16, (2,)) as ds:
        ds.append(np.arange(6, dtype=np.int16).reshape(3, 2))
        np.testing.assert_array_equal(ds[1], [4, 6])
        np.testing.assert_array_equal(ds[-1], [8, 10])
        np.testing.assert_array_equal(ds[np.int64(0)], [0, 2])
        np.testing.assert_array_equal(ds[[0, 2]], [[0, 2], [8, 10]])
        np.testing.assert_array_equal(next(iter(ds)), [0, 2])
    with Deeper("d") as ds:
        np.testing.assert_array_equal(ds[2], [8, 10])
    with Shifted("r", np.int16) as rs:
        rs.append([np.arange(3, dtype=np.int16), np.zeros((1, 2), np.int16)])
        np.testing.assert_array_equal(rs[0], [1, 2, 3])
        np.testing.assert_array_equal(rs[-1], [[1, 1]])
    with DenseStore("d") as ds:  # the class itself reads what is stored
        np.testing.assert_array_equal(ds[1], [2, 3])


def test_a_sampler_subclass_next_override_is_what_iteration_returns():
    """loaderx 1.7.2's ``Sampler.__next__`` returns ``self.next()``: a
    subclass overriding ``next`` is iterated through it. Ours iterated the
    native stream, skipping the override (difftest session 15)."""

    class Shifted(Sampler):
        def next(self):
            return super().next() + 10

    class Deeper(Shifted):
        pass

    s = Shifted(6, 2, 0)
    assert next(s).tolist() == [10, 11]
    assert next(iter(s)).tolist() == [12, 13]
    assert s.next().tolist() == [14, 15]
    assert [b.tolist() for b, _ in zip(Deeper(6, 2, 0), range(2))] == [[10, 11], [12, 13]]
    assert next(Sampler(6, 2, 0)).tolist() == [0, 1]
