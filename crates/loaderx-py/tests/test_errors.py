"""The exception hierarchy: every native failure is a ZrecordError (a
RuntimeError, as in loaderx 1.7.2) with the reference's code, and the kinds
that have a natural builtin also derive from it."""

import numpy as np
import pytest

from loaderx.zrecord import DenseStore, RaggedStore, ZrecordError

from conftest import ours_only


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


def test_append_after_close_fails():
    ds = DenseStore("d", np.uint8, (4,))
    ds.close()
    with pytest.raises(Exception):
        ds.append(np.zeros((1, 4), np.uint8))
