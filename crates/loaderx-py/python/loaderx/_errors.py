"""The exception hierarchy of the store layer.

Every native store failure is a :class:`ZrecordError` (a ``RuntimeError``,
as in loaderx 1.7.2) carrying the reference's numeric ``code``; an invalid
argument the native layer refuses (``level=`` on a raw store, say) is a
plain ``ValueError``. Each kind of failure
is its own subclass, and where Python has a natural builtin for it the subclass
also derives from that builtin: an out-of-range index is an ``IndexError``, a
missing store a ``FileNotFoundError``, a read-only store a ``PermissionError``.
So ``except ZrecordError`` (reference code) and ``except IndexError``
(idiomatic code) both catch it.
"""

# Codes and default messages of loaderx 1.7.2 (``loaderx/_store.py``), plus
# two kinds the reference has no handle state for (-15, -16).
_MESSAGES = {
    -1: "out of memory",
    -2: "file I/O failed",
    -3: "index out of range",
    -4: "record exceeds the 2147483648 byte limit",
    -5: "store is full",
    -6: "buffer too small",
    -7: "stored record failed to decode",
    -8: "invalid or unsupported zrecord store format",
    -9: "zstd dictionary training failed (too few or too small samples)",
    -10: "zstd dictionary is already installed; changing it requires a store rewrite",
    -11: "store not found",
    -12: "store already exists",
    -13: "native store kind mismatch",
    -14: "store is busy (already open by another native handle or process)",
    -15: "store is open read-only",
    -16: "store is closed",
}


class ZrecordError(RuntimeError):
    """A store operation failed. ``code`` is loaderx 1.7.2's error code.

    ``ZrecordError(code)`` builds the reference's message for ``code``;
    ``ZrecordError(code, message)`` carries a more precise one (the native
    layer names the file, index or field). The code is required, as in the
    reference; a subclass (``IndexOutOfRange()``) defaults to its own.
    """

    code = -2

    def __init__(self, code=None, message=None):
        if code is None:
            if type(self) is ZrecordError:
                # loaderx 1.7.2's ZrecordError(code) requires the code; a
                # subclass knows its own.
                raise TypeError("ZrecordError() missing 1 required positional argument: 'code'")
            code = type(self).code
        if message is None:
            message = _MESSAGES.get(code, f"unknown zrecord error {code}")
        RuntimeError.__init__(self, message)
        self.code = code

    def __str__(self):
        return str(self.args[0]) if self.args else ""


class OutOfMemory(ZrecordError, MemoryError):
    code = -1


class StoreIOError(ZrecordError, OSError):
    """An OS call on a file of the store failed. ``errno``, ``strerror``
    and ``filename`` (that file) are set, as on Python's own OSErrors; they
    stay ``None`` on a handle that refuses writes after an earlier failed
    write or sync (which raised with them)."""

    code = -2


class IndexOutOfRange(ZrecordError, IndexError):
    code = -3


class RecordTooLarge(ZrecordError, ValueError):
    code = -4


class StoreFull(ZrecordError):
    code = -5


class BufferTooSmall(ZrecordError, ValueError):
    code = -6


class CorruptRecord(ZrecordError):
    code = -7


class InvalidStore(ZrecordError):
    code = -8


class DictTrainingError(ZrecordError, ValueError):
    code = -9


class DictionaryInstalled(ZrecordError):
    code = -10


class StoreNotFound(ZrecordError, FileNotFoundError):
    """No store at the path; or an input file the OS cannot find (a
    ``.npy``, a text file), with ``errno``, ``strerror`` and ``filename``
    set. A file of a store that is missing makes it an
    :class:`InvalidStore`."""

    code = -11


class StoreExists(ZrecordError, FileExistsError):
    code = -12


class KindMismatch(ZrecordError, ValueError):
    code = -13


class StoreBusy(ZrecordError):
    code = -14


class ReadOnlyStore(ZrecordError, PermissionError):
    code = -15


class StoreClosed(ZrecordError, ValueError):
    code = -16


class UnsupportedDType(ZrecordError, ValueError, TypeError):
    """A dtype the store cannot persist (string, datetime, void, long
    double, a subarray dtype at the top level, a non-string field title).
    An object dtype is a plain ``ValueError``, as in loaderx 1.7.2."""

    code = -8


class UnknownCodec(ValueError, KeyError):
    """A codec name other than ``raw``, ``zstd``, ``zstd_dict``.

    Also a ``KeyError``: loaderx 1.7.2 raised ``KeyError`` here.
    """

    def __str__(self):
        return str(self.args[0]) if self.args else ""


_BY_NAME = {cls.__name__: cls for cls in (
    ZrecordError, OutOfMemory, StoreIOError, IndexOutOfRange, RecordTooLarge,
    StoreFull, BufferTooSmall, CorruptRecord, InvalidStore, DictTrainingError,
    DictionaryInstalled, StoreNotFound, StoreExists, KindMismatch, StoreBusy,
    ReadOnlyStore, StoreClosed, UnsupportedDType,
)}


def _raise(kind, message):
    """Called by the native module: build the exception for ``kind``."""
    cls = _BY_NAME.get(kind, ZrecordError)
    return cls(cls.code, message)
