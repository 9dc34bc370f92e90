"""Zrecord typed persistent stores, one class per record-shape contract.

* ``DenseStore`` — every record is one fixed-shape row; a gather returns one
  new ``(B, *item_shape)`` array, filled by the native store with the GIL
  released (decompression fans out over every core, straight into the array).
* ``RaggedStore`` — records keep their own shapes (dtype unified); a gather
  returns a list of arrays.

The API, defaults, exception types and on-disk format are those of
loaderx 1.7.2. Additions: ``read_only=True`` opens an existing store without
taking the writer lock (such a store pickles: it opens again, read-only,
where it is unpickled), ``level=`` picks the zstd level of this handle's
appends (when a compressed store is created or reopened; it is not stored, and
raw stores and read-only handles refuse one), ``durability=`` says when appends
become durable (see below), and every failure is a precise
:class:`ZrecordError` subclass (``StoreBusy``, ``IndexOutOfRange`` which is
also an ``IndexError``, ...).

Durability. With the default ``durability="at_sync"`` an append (and a
delete of up to 8,192 records) reaches the page cache and returns, as in
loaderx 1.7.2: it survives the process being killed, and becomes durable
against a power cut at ``sync()``, ``close()`` (or leaving the ``with``
block) or ``compact``. Unlike the reference, a power cut before that rolls
the store back to its last durable state (the reference's header could then
name records whose bytes never reached the disk): the store's header names
appends only from the sync on (a ``durable.zr`` marker holds theirs until
then, so loaderx 1.7.2 reading the files sees them after the sync, or after
this package reopens a killed writer's store). ``durability="each_append"``
makes every append and delete durable on return, at the cost of three disk
flushes per append call and about five per delete call.
A handle inherited by a forked process can be read there, but not written
through (``ZrecordError``), and its ``sync``/``close`` there raise while the
opener has appends that are not yet durable: open the store in that process.
Once the opener has forked, its ``compact()`` raises ``StoreBusy`` (a child
may still read through the handle): close and reopen the store to compact.

"""

from pathlib import Path
import ast
import os
import functools
import itertools
import math
import operator

import numpy as np

from . import _native
from ._errors import (
    ZrecordError, IndexOutOfRange, StoreClosed, UnknownCodec, UnsupportedDType,
    StoreBusy, StoreNotFound, KindMismatch, ReadOnlyStore, CorruptRecord,
    InvalidStore, DictTrainingError,
)

__all__ = [
    "DenseStore", "RaggedStore", "ZrecordError", "DICT_TIERS",
    "StoreBusy", "StoreNotFound", "IndexOutOfRange", "KindMismatch",
    "ReadOnlyStore", "StoreClosed", "CorruptRecord", "InvalidStore",
    "UnsupportedDType", "InvalidIndex", "InvalidItemShape",
]

MAX_RECORD_LEN = _native.MAX_RECORD_LEN
_POOL_MIN_BYTES = _native.POOL_MIN_BYTES
# Index arrays up to this long are checked natively (see ``_idxs``).
_NATIVE_CHECK_MAX = 2048

# Named dictionary presets: dictionary size and training-sample byte budget.
DICT_TIERS = {
    "fast":     {"size": 32 << 10, "samples": 4 << 20},
    "balanced": {"size": 128 << 10, "samples": 16 << 20},
    "max":      {"size": 1 << 20, "samples": 64 << 20},
}
DICT_TIER_DEFAULT = "balanced"

CODECS = ("raw", "zstd", "zstd_dict")
DURABILITIES = ("at_sync", "each_append")


def _dict_tier(tier):
    """Resolve a tier name to its ``{size, samples}`` preset."""
    if tier is None:
        tier = DICT_TIER_DEFAULT
    if tier not in DICT_TIERS:
        raise ValueError(
            f"unknown dict tier {tier!r}, expected one of {sorted(DICT_TIERS)}"
        )
    return DICT_TIERS[tier]


def _dtype_identity(dtype):
    """What the native layer persists: ``dtype.str`` or ``dtype.descr``."""
    return dtype.descr if dtype.fields is not None else dtype.str


def _identity_dtype(text):
    """Rebuild the numpy dtype from the native layer's rendering of the stored
    identity: a type string (``'<f4'``) or a descr literal (``[('x', '<f4')]``).

    A descr is read back with ``np.lib.format.descr_to_dtype`` (what
    ``np.load`` uses), so its unnamed ``('', '|V7')`` padding entries become
    offsets again, not extra fields: an ``align=True`` dtype comes back
    equal to itself. The native text writes a titled field's key as the
    tuple ``('title', 'name')``, the one form ``descr_to_dtype`` takes for a
    title, so titles come back too."""
    if text.startswith("["):
        return np.lib.format.descr_to_dtype(ast.literal_eval(text))
    return np.dtype(text)


class InvalidItemShape(TypeError, ValueError):
    """``item_shape`` is not a sequence of integers (a string, or an entry
    that is not a whole number). A ``TypeError``, and also a ``ValueError``:
    loaderx 1.7.2 ran ``int()`` over the entries and raised one."""


def _item_shape(item_shape):
    """``item_shape`` as a tuple of ints: a sequence of integers or
    whole-number floats (fractional floats, strings and bools refused
    rather than truncated or parsed)."""
    if isinstance(item_shape, (str, bytes)) or not hasattr(item_shape, "__iter__"):
        hint = f" (did you mean ({item_shape!r},)?)" if isinstance(item_shape, int) else ""
        raise InvalidItemShape(
            f"item_shape must be a sequence of ints, got {type(item_shape).__name__} "
            f"{item_shape!r}{hint}"
        )
    dims = []
    for d in item_shape:
        if isinstance(d, (float, np.floating)) and float(d).is_integer():
            dims.append(int(d))  # 2.0, as loaderx 1.7.2's int() takes it
            continue
        if isinstance(d, (bool, np.bool_)) or not hasattr(type(d), "__index__"):
            raise InvalidItemShape(
                f"item_shape entries must be integers, got {type(d).__name__} {d!r} "
                f"in {item_shape!r}"
            )
        dims.append(operator.index(d))
    return tuple(dims)


def _level(level):
    """``level`` as an int the native layer takes (it checks zstd's range),
    or None; refused by name, before anything is opened or created, where
    the binding's conversion raised OverflowError or a TypeError that did
    not say which argument (and took ``True`` as level 1)."""
    if level is None:
        return None
    if isinstance(level, (bool, np.bool_)) or not hasattr(type(level), "__index__"):
        raise TypeError(f"level must be an integer zstd level, got {type(level).__name__} {level!r}")
    v = operator.index(level)
    if not -2**31 <= v < 2**31:
        raise ValueError(f"level={v} is outside zstd's range of compression levels")
    return v


def _out_problem(out, shape, dtype):
    """Why the array ``out`` cannot take records of ``shape`` and ``dtype``
    (``None`` if it can)."""
    if out.dtype != dtype:
        return (f"has dtype {_dtype_identity(out.dtype)!r}, the store holds "
                f"{_dtype_identity(dtype)!r}")
    if out.shape != shape:
        return f"has shape {out.shape}, the records need {shape}"
    if not out.flags.writeable:
        return "is read-only"
    if not out.flags.c_contiguous:
        return "is not C-contiguous"
    return None


def _object_field(dtype, path=()):
    """The dotted path to the first object-holding field of a structured
    ``dtype`` ('' when the dtype itself is one)."""
    for name in dtype.names or ():
        sub = dtype.fields[name][0]
        if sub.hasobject:
            return _object_field(sub.base, path + (name,))
    return ".".join(path)


def _check_dtype(dtype):
    if dtype.hasobject:
        field = _object_field(dtype)
        where = f" (field {field!r})" if field else ""
        raise ValueError(f"object dtypes cannot be persisted{where}")
    if dtype.subdtype is not None:
        base, shape = dtype.subdtype
        raise UnsupportedDType(
            None,
            f"{dtype} is a subarray dtype: store its base dtype {base.str!r} and put "
            f"{shape} in the record shape (item_shape, or each ragged record's shape)",
        )


@functools.lru_cache(maxsize=64)
def _has_padding(dtype):
    """Whether some byte of a ``dtype`` item belongs to no field (an
    ``align=True`` or offset-spaced structure, at any depth)."""
    if dtype.names is None and dtype.subdtype is None:
        return False
    covered = bytearray(dtype.itemsize)

    def mark(dt, at):
        """Marks the bytes `dt` covers at `at`; True when `dt` itself (a
        subarray's element, at any depth) has padding."""
        if dt.subdtype is not None and dt.subdtype[0].names is not None:
            # Elements of one dtype back to back: padded exactly when the
            # element is (asked once, cached), not element by element (a
            # million-element subarray took a second).
            if _has_padding(dt.subdtype[0]):
                return True
        elif dt.names is not None:
            return any(mark(dt.fields[name][0], at + dt.fields[name][1])
                       for name in dt.names)
        covered[at:at + dt.itemsize] = b"\x01" * dt.itemsize
        return False

    return mark(dtype, 0) or not all(covered)


def _c_order(a):
    """``a`` in C order. A copy of a non-contiguous array of a padded
    structured dtype is made field by field into a zeroed array, so its
    padding bytes are zeros: NumPy's own copy (``ascontiguousarray``)
    copies only the fields and leaves the padding as the allocator gave
    it, which then reached the store's files (as in loaderx 1.7.2), making
    them differ from run to run. A contiguous array is stored as it is,
    its padding bytes included."""
    if a.flags.c_contiguous or not _has_padding(a.dtype):
        return np.ascontiguousarray(a)
    out = np.zeros(a.shape, a.dtype)
    out[...] = a
    return out


class InvalidIndex(TypeError, IndexError):
    """An object that is no kind of record index (``None``, a string, a
    complex number, a tuple with a slice in it). A ``TypeError``, as
    loaderx 1.7.2 raised there (and as Python's sequences do), and an
    ``IndexError`` as well, like every other index refusal here."""


def _is_int_index(idx):
    """Whether ``idx`` is one integer index: an ``int`` or a NumPy integer
    scalar. NumPy's ``timedelta64`` is a ``np.signedinteger`` too, but a
    duration is no record index: it is refused, as a ``timedelta64`` index
    array is (``int()`` took ``np.timedelta64(1)`` as record 1 and failed
    on ``np.timedelta64(1, 's')`` with a bare ``TypeError``)."""
    return isinstance(idx, (int, np.integer)) and not isinstance(idx, np.timedelta64)


def _integral(idxs, where=""):
    """Float arrays of whole numbers, and object arrays of Python / NumPy
    integers (what pandas hands out), as int64 indices, since loaderx 1.7.2
    accepts them; a fractional or non-finite float, or any other object,
    is an IndexError rather than a silent truncation."""
    if idxs.dtype.kind == "f":
        whole = np.trunc(idxs) == idxs  # False for nan; inf is caught below
        whole &= np.isfinite(idxs)
        if not whole.all():
            bad = idxs[~whole].flat[0].item()
            raise IndexError(f"record index {bad!r} is not a whole number")
        # Would not fit int64 (astype wraps). The bound is a float64
        # scalar, not a Python float: NumPy 2 casts a Python float to the
        # array's dtype, and 2**63 overflows float16 (a RuntimeWarning on
        # every float16 index array, an error under -W error).
        big = np.abs(idxs) >= np.float64(2.0**63)
        if big.any():
            raise IndexOutOfRange(
                None, f"{where}record index {idxs[big].flat[0].item()!r} is out of range")
        return idxs.astype(np.int64)
    for v in idxs.flat:
        if not _is_int_index(v) or isinstance(v, (bool, np.bool_)):
            raise InvalidIndex(
                f"record index {v!r} ({type(v).__name__}) is not an integer"
            )
    try:
        return idxs.astype(np.int64)
    except OverflowError:
        big = max(idxs.flat, key=abs)
        raise IndexOutOfRange(None, f"{where}record index {big} is out of range") from None


class _Handle:
    """The open native handle of a store, shared by the store object and its
    shallow copies (``copy.copy`` shares loaderx 1.7.2's handle too): it is
    released when the last of them goes, or by ``close()`` on any of them.
    (Closing in the store object's own ``__del__`` closed a handle that a
    copy still used.)"""

    __slots__ = ("core",)

    def __init__(self, core):
        self.core = core

    def __del__(self):
        core = getattr(self, "core", None)
        if core is not None:
            self.core = None
            try:
                core.close()  # syncs deferred appends, GIL released
            except Exception:
                pass


def _reopen_read_only(cls, path):
    """Unpickles a read-only store: opens it again, read-only."""
    return cls(path, read_only=True)


class _Base:
    """Type identity, index normalization and lifecycle common to both kinds."""

    _handle = None
    # Whether a subclass overrides ``__getitems__`` (set per class below).
    _own_getitems = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # loaderx 1.7.2 reads one integer index as
        # ``self.__getitems__([i])[0]``, so a subclass that overrides
        # ``__getitems__`` (a wrapper that decodes or augments records)
        # gets ``ds[i]``, and iteration, through its override too. Ours
        # reads one record on a faster path of its own; a class whose
        # ``__getitems__`` is not this module's keeps the reference's
        # route. Found by the differential test (session 15).
        for c in cls.__mro__:
            if c.__module__ == __name__:
                cls._own_getitems = False
                break
            if "__getitems__" in vars(c):
                cls._own_getitems = True
                break

    @property
    def _core(self):
        """The open native handle, ``None`` once closed."""
        handle = self._handle
        return None if handle is None else handle.core

    def __init__(self, path, kind, dtype=None, item_shape=None, codec=None,
                 dict_bytes=None, read_only=False, level=None,
                 durability="at_sync"):
        self.path = Path(path)
        # Where a pickled copy reopens, whatever the working directory is
        # by then. Not os.path.abspath: it drops "link/.." as text, where
        # the system follows the link first (another directory's store).
        self._abs_path = os.fspath(self.path.absolute())
        self._kind = kind
        self.read_only = bool(read_only)
        if durability not in DURABILITIES:
            raise ValueError(
                f"unknown durability {durability!r}, expected one of {list(DURABILITIES)}"
            )
        self.durability = str(durability)  # np.str_('at_sync') included
        level = _level(level)
        if self.read_only and level is not None:
            raise ReadOnlyStore(
                None,
                f"{self.path}: level={level!r} sets the zstd level of appends, "
                "and a read_only=True store makes none",
            )
        # '' or 0 creates a store of the default codec (`codec or "zstd"`,
        # as loaderx 1.7.2 does), and reopening with one is a mismatch.
        if codec is not None and codec and codec not in CODECS:
            raise UnknownCodec(
                f"unknown codec {codec!r}, expected one of {list(CODECS)}"
            )
        # With what a create needs, a killed create's leftovers are no store
        # (the create clears them); an open still reports them.
        creating = (not self.read_only and dtype is not None
                    and (kind == "ragged" or item_shape is not None))
        found = _native.probe(str(self.path), creating)
        native = _native.DenseCore if kind == "dense" else _native.RaggedCore
        if found is not None:
            if found != kind:
                raise KindMismatch(
                    None, f"{self.path} is a {found!r} store, not {kind!r}"
                )
            if dict_bytes is not None:
                raise ValueError("dict_bytes is only accepted when creating a store")
            core = native.open(str(self.path), self.read_only, level, durability)
            try:
                stored = _identity_dtype(core.dtype)
                if dtype is not None and stored != np.dtype(dtype):
                    raise ValueError(
                        f"{self.path} holds dtype {_dtype_identity(stored)!r}, "
                        f"cannot open as {np.dtype(dtype).str!r}"
                    )
                if codec is not None and core.codec != codec:
                    raise ValueError(
                        f"{self.path} holds codec {core.codec!r}, "
                        f"cannot open as {codec!r}"
                    )
                if kind == "dense" and item_shape is not None:
                    want = _item_shape(item_shape)
                    if tuple(core.item_shape) != want:
                        raise ValueError(
                            f"{self.path} holds item_shape {tuple(core.item_shape)}, "
                            f"cannot open as {want}"
                        )
            except BaseException:
                core.close()
                raise
            self.dtype = stored
            self.codec = core.codec
        else:
            if self.read_only:
                raise StoreNotFound(
                    None, f"{self.path} is not a loaderx store (read_only=True never creates one)"
                )
            if dtype is None or (kind == "dense" and item_shape is None):
                need = "dtype and item_shape" if kind == "dense" else "dtype"
                raise StoreNotFound(
                    None,
                    f"{self.path} is not a loaderx store; to create one, "
                    f"{type(self).__name__} needs {need} (got dtype={dtype!r}"
                    + (f", item_shape={item_shape!r})" if kind == "dense" else ")"),
                )
            self.dtype = np.dtype(dtype)
            _check_dtype(self.dtype)
            self.codec = codec or "zstd"
            if self.codec == "zstd_dict" and dict_bytes is None:
                raise ValueError(
                    "creating a zstd_dict store requires dict_bytes from train_dict"
                )
            if self.codec != "zstd_dict" and dict_bytes is not None:
                raise ValueError("dict_bytes requires codec='zstd_dict'")
            if dict_bytes is not None:
                # A bytes-like object (bytes, memoryview, a NumPy array); not
                # bytes()'s other inputs: an int (that many zeros), a list or
                # tuple of ints (a few-byte "dictionary"), a str.
                try:
                    memoryview(dict_bytes)
                except TypeError:
                    raise TypeError(
                        "dict_bytes must be the bytes train_dict returned, got "
                        f"{type(dict_bytes).__name__}"
                    ) from None
                dict_bytes = bytes(dict_bytes)
                if not dict_bytes:
                    raise DictTrainingError(
                        None, "dict_bytes is empty: pass a dictionary from train_dict"
                    )
            identity = _dtype_identity(self.dtype)
            if kind == "dense":
                shape = _item_shape(item_shape)
                if any(d < 1 for d in shape):
                    raise ValueError(
                        f"item_shape {shape} gives empty records; every dimension "
                        "must be at least 1"
                    )
                if len(shape) > 63:
                    raise ValueError(
                        f"item_shape has {len(shape)} dimensions; at most 63 (a batch "
                        "adds one, and NumPy allows 64)"
                    )
                row = math.prod(shape) * self.dtype.itemsize
                if row > MAX_RECORD_LEN:
                    raise ValueError(
                        f"item_shape {shape} of {self.dtype} gives {row}-byte records; "
                        f"the limit is {MAX_RECORD_LEN} (2**31)"
                    )
                core = native.create(str(self.path), identity, list(shape),
                                     self.codec, dict_bytes, level, durability)
            else:
                core = native.create(str(self.path), identity, self.codec,
                                     dict_bytes, level, durability)
        self._handle = _Handle(core)
        if kind == "dense":
            self.item_shape = tuple(core.item_shape)
            self._row_bytes = core.record_bytes

    # -- lifecycle ----------------------------------------------------------

    @property
    def _store(self):
        """The open native handle (``None`` once closed, like the reference)."""
        return self._core

    def _open(self):
        # Every call goes through here: one attribute chain, no property.
        try:
            core = self._handle.core
        except AttributeError:  # never opened: no handle
            core = None
        if core is None:
            raise StoreClosed(None, f"{self.path}: store is closed")
        return core

    def __len__(self):
        return self._open().len()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.close()

    def close(self):
        """Make deferred appends durable and release the store (and its
        lock). Idempotent; raises if the final sync fails (the handle is
        released either way, and the next open recovers)."""
        handle = self._handle
        core = None if handle is None else handle.core
        if core is not None:
            handle.core = None
            core.close()

    def __copy__(self):
        # A shallow copy shares the open handle, as in loaderx 1.7.2 (and as
        # before __reduce__ existed, which copy.copy would otherwise use).
        dup = object.__new__(type(self))
        dup.__dict__.update(self.__dict__)
        return dup

    def __reduce__(self):
        """Pickling, for worker processes started with ``spawn`` or
        ``forkserver`` (a PyTorch ``DataLoader``'s workers; ``forkserver`` is
        Linux's default from Python 3.14): a ``read_only=True`` store pickles
        as its absolute path and is opened again, read-only, where it is
        unpickled; that process then holds its own handle and sees the
        store as it is then. ``copy.deepcopy`` does the same. A read-write
        store does not pickle (``TypeError``): its lock is exclusive and
        belongs to this process."""
        name = type(self).__name__
        if self._core is None:
            raise TypeError(f"cannot pickle {name} {str(self.path)!r}: the store is closed")
        if not self.read_only:
            raise TypeError(
                f"cannot pickle a read-write {name} ({str(self.path)!r}): its lock "
                "belongs to this process; open it with read_only=True to share it "
                "with worker processes"
            )
        return (_reopen_read_only, (type(self), self._abs_path))

    def __repr__(self):
        state = "closed" if self._core is None else f"{len(self)} records"
        extra = f", item_shape={self.item_shape}" if self._kind == "dense" else ""
        return (f"{type(self).__name__}({str(self.path)!r}, dtype={self.dtype}"
                f"{extra}, codec={self.codec!r}; {state})")

    # -- indices ------------------------------------------------------------

    def _one(self, idx):
        """One index (an ``int`` or NumPy integer) as a position in range."""
        n = len(self)
        i = int(idx)
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise IndexOutOfRange(
                None, f"{self.path}: index {i} is out of range for {n} records"
            )
        return j

    def _idxs(self, idx):
        """Normalize a scalar, slice, index container or bool mask to a
        C-contiguous uint64 array of in-range indices (negatives wrap).

        The array is always a new one, never the caller's: the native
        store reads it with the GIL released, and another thread may
        rewrite the caller's array meanwhile, so the indices checked here
        are a copy nobody else can change before the read."""
        if _is_int_index(idx):
            return np.array([self._one(idx)], dtype=np.uint64)
        if isinstance(idx, np.timedelta64):
            raise InvalidIndex(
                "only integers, slices, integer arrays and boolean masks are "
                f"valid record indices, got a timedelta64 {idx!r}"
            )
        n = len(self)
        if isinstance(idx, slice):
            return np.arange(*idx.indices(n), dtype=np.int64).astype(np.uint64)
        if type(idx) is list and 0 < len(idx) <= _NATIVE_CHECK_MAX:
            # A short list of plain ints, resolved natively without a NumPy
            # round trip; anything else in it (bools, floats, NumPy
            # scalars) comes back None and goes the NumPy way below.
            got = _native.list_positions(idx, n, str(self.path))
            if got is not None:
                return got
        if isinstance(idx, (str, bytes)):
            raise InvalidIndex(
                "only integers, slices, integer arrays and boolean masks are "
                f"valid record indices, got {type(idx).__name__} {idx!r}"
            )
        idxs = np.asarray(idx)
        if idxs.dtype == np.bool_:
            # A mask of any rank whose size is the store's selects in C
            # order, flattened (as loaderx 1.7.2 does, and as for an N-D
            # integer array). Of another size (which the reference took
            # as far as it went, refusing a True past the end) or 0-d, it
            # is refused, as the reference's refusal is: IndexOutOfRange.
            if idxs.ndim == 0 or idxs.size != n:
                raise IndexOutOfRange(
                    None,
                    f"{self.path}: boolean mask of shape {idxs.shape} "
                    f"({idxs.size} entries) does not match {n} records",
                )
            return np.flatnonzero(idxs).astype(np.uint64)
        if idxs.size == 0:
            return np.empty(0, dtype=np.uint64)
        if idxs.dtype.kind in "fO":
            idxs = _integral(idxs, f"{self.path}: ")
        if idxs.dtype.kind not in "iu":
            raise InvalidIndex(
                "only integers, slices, integer arrays and boolean masks are "
                f"valid record indices, got an array of {idxs.dtype}"
            )
        idxs = idxs.reshape(-1)
        # Native-order, aligned, C-contiguous uint64 or int64 (any other
        # width or byte order is widened first, unsigned staying unsigned so
        # no value wraps).
        want = np.uint64 if idxs.dtype.kind == "u" else np.int64
        if idxs.dtype != want or not (idxs.flags.c_contiguous and idxs.flags.aligned):
            idxs = np.require(idxs, dtype=want, requirements="CA")
        if idxs.size <= _NATIVE_CHECK_MAX:
            # Range check, negatives wrapped and the copy, in one native
            # pass: NumPy's per-call cost dominates on short index lists.
            return _native.positions(idxs, n, str(self.path))
        # Long ones: NumPy's reductions use the CPU's vector units (picked
        # at run time; the wheel is built for baseline x86-64), over a copy
        # (see the docstring; `require` above returns the caller's array
        # when it already has the layout).
        idxs = idxs.copy()
        if idxs.dtype.kind == "i":
            lo = int(idxs.min())
            if lo < 0:
                if lo < -n:
                    raise IndexOutOfRange(
                        None, f"{self.path}: index {lo} is out of range for {n} records"
                    )
                idxs = np.where(idxs < 0, idxs + n, idxs)
        hi = int(idxs.max())
        if hi >= n:
            raise IndexOutOfRange(
                None, f"{self.path}: index {hi} is out of range for {n} records"
            )
        return np.ascontiguousarray(idxs, dtype=np.uint64)

    def __getitem__(self, idx):
        """A scalar returns one record; anything else is a record set —
        ``ds[0, 5, 2]``, a list, an array, a slice or a bool mask — with
        negative indices wrapping from the end."""
        if _is_int_index(idx):
            j = self._one(idx)
            if self._own_getitems:
                return self.__getitems__(np.array([j], dtype=np.uint64))[0]
            return self._get_one(j)
        return self.__getitems__(idx)

    # -- maintenance --------------------------------------------------------

    def has_dict(self):
        """True if the store has a zstd dictionary installed."""
        return self._open().has_dict()

    def sync(self):
        """Make every append and delete so far durable: flush payloads and
        record locations, then write and flush the header (and end the
        ``durable.zr`` marker that held or protected deferred work). With
        only appends since the last sync this is the reference's three disk
        flushes."""
        self._open().sync()

    def delete(self, idx):
        """Remove records, keeping the index space dense (swap-last: a
        survivor's index may change). Normalized like reads. Gathers
        through this handle from other threads wait while it runs; one
        racing it reads each record whole, at its old or its new index (or
        raises ``IndexOutOfRange`` for an index past the new length).

        With ``durability="at_sync"`` (the default) a delete of up to 8,192
        records (4,096 in a ragged store) is deferred like an append: a killed process keeps it, and
        it is durable at the next :meth:`sync`, :meth:`close` or
        :meth:`compact` (a power cut before that undoes it with the appends
        since the last sync). It only logs itself: the next append or sync
        writes pending deletes in place after one flush of that log, which
        lets such a roll-back restore what they overwrote. Larger
        deletes, and every delete under ``"each_append"``, are durable when
        they return: about five disk flushes per call however many records
        they remove. Either way, one call with every index beats a loop."""
        idxs = self._idxs(idx)
        self._open().delete(idxs)

    def compact(self):
        """Reclaim the space left behind by :meth:`delete`, in place.
        Offline: gathers through this handle from other threads wait until
        it finishes (no other handle can hold the store meanwhile)."""
        self._open().compact()

    def stats(self):
        """``{'records', 'live_bytes', 'chunk_bytes', 'reclaimable'}``."""
        return self._open().stats()

    def verify(self):
        """Checks the whole store (an extension; loaderx 1.7.2 has none):
        every entry lies inside the committed data, no two records share
        stored bytes, the location files hold the entries, and every record
        decodes to its recorded length (and, in a ragged store, agrees with
        its shape). Reads and decodes everything, in parallel, with the GIL
        released.

        Returns ``{'ok', 'records', 'decoded_bytes', 'bad', 'problems'}``:
        ``bad`` lists ``(index, what)`` for every damaged record,
        ``problems`` what is wrong with the files as a whole. Raises only
        when the check cannot run (a closed store, an unreadable file)."""
        return self._open().verify()


class DenseStore(_Base):
    """Fixed-shape records: one ``item_shape`` row per record.

    ``DenseStore(path)`` opens an existing store; ``DenseStore(path, dtype,
    item_shape, codec='zstd', dict_bytes=None)`` creates one if none exists
    (and validates the arguments against it otherwise). Reads return
    ``(len(idxs), *item_shape)`` arrays; ``ds[i]`` is one ``item_shape`` record.
    """

    def __init__(self, path, dtype=None, item_shape=None, codec=None,
                 dict_bytes=None, *, read_only=False, level=None,
                 durability="at_sync"):
        super().__init__(path, "dense", dtype, item_shape, codec, dict_bytes,
                         read_only, level, durability)

    def _prepare_dense(self, batch):
        batch = np.asarray(batch)
        if batch.ndim == 0:
            batch = batch.reshape(1)
        if batch.dtype != self.dtype:
            raise ValueError(
                f"dense append dtype {batch.dtype} != store dtype {self.dtype}"
            )
        if batch.ndim != len(self.item_shape) + 1 or batch.shape[1:] != self.item_shape:
            raise ValueError(
                f"dense append shape {batch.shape} != (batch, *{self.item_shape})"
            )
        if len(batch) == 0:
            raise ValueError("append needs at least one record")
        return _c_order(batch)

    def append(self, records):
        """Append one ``(batch, *item_shape)`` array; returns the first new
        record's index. Compression runs on every core, GIL released.

        Each call is one commit, durable at the next ``sync()`` or ``close()``
        (with ``durability="each_append"``, on return, at three disk flushes
        per call).

        A C-contiguous array is read in place, not copied, while the GIL is
        released: if another thread writes into it during the call, the
        appended records may hold a mix of its old and new bytes (each still
        a record of the right size that reads back; no other record and
        nothing of the store is affected). Do not write into an array while
        it is being appended."""
        core = self._open()
        src = self._prepare_dense(records)
        return core.append(src.reshape(-1).view(np.uint8))

    def _get_one(self, j):
        if self._row_bytes >= _POOL_MIN_BYTES:
            return self.__getitems__(np.array([j], dtype=np.uint64))[0]
        # One record straight into its own array (no index array, no
        # reshape): several times faster than a batch of one, which is what
        # a map-style ``Dataset.__getitem__`` calls per sample.
        one = self._open().get(j, self.dtype)
        return one[()] if one.ndim == 0 else one  # a scalar, as ``batch[0]`` gives

    def __getitems__(self, idxs):
        core = self._open()
        idxs = self._idxs(idxs)
        shape = (idxs.size, *self.item_shape)
        if idxs.size * self._row_bytes >= _POOL_MIN_BYTES:
            # Filled in a recycled, page-aligned buffer that returns to the
            # pool when the array dies (no page faults in a steady loop).
            return core.gather(idxs).view(self.dtype).reshape(shape)
        if not idxs.size:
            return np.empty(shape, dtype=self.dtype)
        # A new array of the batch, made and filled natively.
        return core.gather_new(idxs, self.dtype)

    def gather_into(self, idx, out):
        """Read the records at ``idx`` into ``out`` and return ``out``
        (an extension; loaderx 1.7.2 has no such method).

        ``idx`` takes every form ``ds[idx]`` does. ``out`` is a writable,
        C-contiguous NumPy array of exactly the result's shape and the
        store's dtype (byte order included): ``item_shape`` for one integer
        index, ``(len, *item_shape)`` for anything else. No new array is
        made, so a loop can refill one buffer, or fill memory allocated
        elsewhere: page-locked (pinned) memory for fast copies to a GPU, a
        shared-memory segment, a slice of a larger batch. The read releases
        the GIL; ``out`` must not be used by another thread meanwhile. If the
        read fails (a damaged record), ``out`` may be partly written.

        Raises:
            TypeError: ``out`` is not a NumPy array.
            ValueError: wrong dtype or shape, or ``out`` is read-only or not
                C-contiguous (each named with what was expected).
        """
        if not isinstance(out, np.ndarray):
            raise TypeError(
                f"out must be a numpy.ndarray, got {type(out).__name__}"
            )
        core = self._open()
        if _is_int_index(idx):
            idxs = np.array([self._one(idx)], dtype=np.uint64)
            shape = self.item_shape
        else:
            idxs = self._idxs(idx)
            shape = (idxs.size, *self.item_shape)
        problem = _out_problem(out, shape, self.dtype)
        if problem:
            raise ValueError(f"out {problem}")
        if idxs.size:
            if np.may_share_memory(idxs, out):
                idxs = idxs.copy()  # indices read from the bytes being written
            flat = out.view(np.ndarray).reshape(-1).view(np.uint8)
            core.gather_into(idxs, flat)
        return out


class RaggedStore(_Base):
    """Variable-shape records: dtype unified, each record keeps its shape.

    Append takes an iterable of array-likes (or ``bytes`` for a ``uint8``
    store); a gather returns a list of arrays with their written shapes
    (scalars keep ``shape == ()``). Zero-byte records are rejected.
    """

    def __init__(self, path, dtype=None, codec=None, dict_bytes=None, *,
                 read_only=False, level=None, durability="at_sync"):
        super().__init__(path, "ragged", dtype, None, codec, dict_bytes,
                         read_only, level, durability)

    def _prepare_batch(self, records):
        """Pack records into ``(payload uint8, byte offsets, shapes)``."""
        dtype = self.dtype
        # NumPy's concatenation converts to native byte order and packs
        # structured records field by field (their padding lost): records of
        # such dtypes are concatenated as bytes.
        as_bytes = not (dtype.isnative and dtype.kind in "biufc")
        bufs, shapes = [], []
        for k, record in enumerate(records):
            # The common case first, in as few NumPy calls as it takes: a
            # C-contiguous array of the store's dtype, kept as it is.
            if type(record) is np.ndarray and record.flags.c_contiguous and record.dtype == dtype \
                    and 0 < record.nbytes <= MAX_RECORD_LEN:
                b = record.ravel()
                bufs.append(b.view(np.uint8) if as_bytes else b)
                shapes.append(record.shape)
                continue
            # bytes are raw uint8 records (an extension); a memoryview is an
            # array like any other, its format and shape kept, as in
            # loaderx 1.7.2.
            if isinstance(record, (bytes, bytearray)):
                if dtype != np.dtype(np.uint8):
                    raise ValueError(
                        f"{self.path}: record {k} of the batch is bytes (uint8), but the store holds {dtype}"
                    )
                b = np.frombuffer(record, dtype=np.uint8)
                shape = (len(b),)
            else:
                a = np.asarray(record)
                if a.dtype != dtype:
                    raise ValueError(
                        f"{self.path}: record {k} of the batch has dtype {a.dtype}, the store holds {dtype}"
                    )
                shape = a.shape
                b = _c_order(a).reshape(-1)
                if as_bytes:
                    b = b.view(np.uint8)
            n = b.nbytes
            if n == 0:
                raise ValueError(
                    f"{self.path}: record {k} of the batch is empty (shape {shape}); empty records are not stored"
                )
            if n > MAX_RECORD_LEN:
                raise ValueError(
                    f"{self.path}: record {k} of the batch has {n} bytes, over the {MAX_RECORD_LEN}-byte record limit"
                )
            bufs.append(b)
            shapes.append(shape)
        if not bufs:
            raise ValueError("append needs at least one record")
        offsets = np.array([0, *itertools.accumulate([b.nbytes for b in bufs])], dtype=np.uint64)
        # Every buffer is 1-D and contiguous, of the store's dtype or bytes
        # (structured stores; bytes records only reach a uint8 store): one
        # concatenation, then its bytes; a lone record is read in place.
        src = bufs[0] if len(bufs) == 1 else np.concatenate(bufs)
        return src.view(np.uint8), offsets, shapes

    def append(self, records):
        """Append an iterable of records under one native commit; returns the
        first new record's index. The commit is durable at the next
        ``sync()`` or ``close()`` (with ``durability="each_append"``, on
        return, at three disk flushes per call).

        A batch of one C-contiguous array is read in place while the GIL is
        released, as ``DenseStore.append`` reads its array: do not write
        into it from another thread during the call."""
        core = self._open()
        src, offsets, shapes = self._prepare_batch(records)
        return core.append(src, offsets, shapes)

    def _get_one(self, j):
        return self._open().gather(np.array([j], dtype=np.uint64), self.dtype)[0]

    def gather_packed(self, idx):
        """The records at ``idx`` packed into one array (an extension;
        loaderx 1.7.2 has no such method): ``(values, offsets, shapes)``.

        ``values`` is a new 1-D array of the store's dtype holding every
        record's elements in order (each record's in C order): a view of
        the buffer the gather filled, which it keeps alive, so it is never
        copied; ``offsets``
        is an int64 array of ``len + 1`` element offsets, so record ``k`` is
        ``values[offsets[k]:offsets[k + 1]].reshape(shapes[k])``; ``shapes``
        is a list of shape tuples. ``idx`` takes every form ``rs[idx]``
        does (one integer gives a batch of one).

        One array per batch instead of one per record: what sequence
        packing and variable-length attention kernels take (``offsets`` is
        their ``cu_seqlens``, ``np.diff(offsets)`` the lengths), and cheaper
        to make than a list of arrays.
        """
        core = self._open()
        return core.gather_packed(self._idxs(idx), self.dtype)

    def __getitems__(self, idxs):
        core = self._open()
        idxs = self._idxs(idxs)
        if idxs.size == 0:
            return []
        # One packed buffer; each record a view of it with its own shape.
        return core.gather(idxs, self.dtype)
