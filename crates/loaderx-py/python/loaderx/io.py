"""Fast readers for the two formats training data usually arrives in.

* :func:`loadtxt` — delimited numeric text, parsed in parallel straight into
  one float array (the signature of ``fast_loadtxt.loadtxt``, plus NumPy's
  ``delimiter`` / ``usecols`` / ``max_rows`` / ``dtype``).
* :func:`npy_header`, :func:`load_npy`, :func:`load_npy_prefix` — ``.npy``
  files: the validated header, the whole array, or only its first rows (no
  read past them). Arrays keep the file's dtype exactly (byte order
  included), like ``np.load``.

All parsing and reading runs natively with the GIL released.
"""

import errno
import operator
import os
import stat

import numpy as np

from . import _native
from .zrecord import _identity_dtype

__all__ = ["loadtxt", "npy_header", "load_npy", "load_npy_prefix"]

_BIG = 2**62  # larger counts behave alike; native arguments are 64-bit


def _byte(value, name):
    if value is None:
        return None
    if not isinstance(value, (str, bytes)):
        raise TypeError(
            f"{name} must be a single ASCII character, got "
            f"{type(value).__name__} {value!r}"
        )
    if isinstance(value, str):
        if len(value) != 1 or not value.isascii():
            raise ValueError(f"{name} must be a single ASCII character, got {value!r}")
        value = value.encode()
    if len(value) != 1 or value[0] > 0x7F:
        raise ValueError(f"{name} must be a single ASCII character, got {value!r}")
    return value[0]


def _index(value, name):
    """``value`` as an int, refusing floats and strings as numpy does."""
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(
            f"{name} must be an integer, got {type(value).__name__} {value!r}"
        ) from None


def _usecols(usecols):
    """An int or a sequence of ints (numpy's rule), as a list of ints."""
    try:
        return [operator.index(usecols)]
    except TypeError:
        pass
    if isinstance(usecols, (str, bytes)):
        items = None
    else:
        try:
            items = list(usecols)
        except TypeError:
            items = None
    bad = None if items is None else next(
        (c for c in items if not hasattr(type(c), "__index__")), None)
    if items is None or bad is not None:
        what = type(usecols if items is None else bad).__name__
        raise TypeError(f"usecols must be an int or a sequence of ints, "
                        f"not {what}")
    return [operator.index(c) for c in items]


def loadtxt(filepath, comment="#", skip_rows=0, chunk_size=500, num_threads=0,
            *, delimiter=None, usecols=None, max_rows=None, dtype=np.float64):
    """Load a text file of numbers into a 2-D array (rows x columns).

    Args:
        filepath (str | Path): the file (space/tab separated, or
            ``delimiter``-separated).
        comment (str | None): comment character, default ``'#'``.
        skip_rows (int): header data lines to skip (after comments).
        chunk_size (int): rows per parallel chunk, as a hint (the parser
            splits the file into byte ranges of about ``chunk_size`` lines).
        num_threads (int): worker threads; 0 uses every core.
        delimiter (str, optional): one-character field separator.
        usecols (int or sequence of int, optional): columns to keep, in
            output order; negative indices count from the last column, and
            a column may be named more than once (as in NumPy). An empty
            sequence gives ``(rows, 0)``.
        max_rows (int, optional): read at most this many data rows.
        dtype: ``np.float64`` (default) or ``np.float32``.

    Returns:
        np.ndarray: shape ``(rows, columns)``; for a file without data rows
        ``(0, 0)``, or ``(0, len(usecols))`` (numpy with ``ndmin=2``: ``(0,
        1)`` without usecols). ``max_rows=0`` gives ``(0, columns)`` where
        numpy reads no line (``(0, 1)``, and a warning).

    The text is read as numpy reads it (UTF-8): without a delimiter, fields
    are split at any whitespace of ``str.isspace()`` (no-break and other
    Unicode spaces too), which is also stripped around delimited fields. A
    line holding only whitespace and comments is skipped; with a delimiter,
    as in numpy, only a comment or empty line is, and a line of blanks is a
    row with one blank field (an error).

    Lines end with LF or CRLF. Unlike ``numpy.loadtxt``, a lone CR (an old
    Mac line ending) is an error rather than a line end, in a comment too,
    and compressed files (gzip, bzip2, xz, zstd) are refused rather than
    decompressed. A pipe, FIFO, ``/dev/stdin`` or ``/dev/fd/N`` (bash's
    ``<(zcat data.gz)``) is read whole, then parsed.

    With ``dtype=np.float32`` each number is parsed straight to the
    correctly rounded float32. ``numpy.loadtxt(..., dtype=np.float32)``
    parses to float64 and then casts, rounding twice: for about 1.5% of
    random decimal tokens (those whose float64 lies on a float32 rounding
    midpoint) numpy's value is 1 ulp off. To reproduce numpy's values
    exactly, load float64 and cast:
    ``loadtxt(..., dtype=np.float64).astype(np.float32)``.

    Errors name the file, the line and the column, both counted from 1.

    A regular file is memory-mapped while it is parsed: it must not be
    truncated or rewritten until this returns. Truncating it mid-load kills
    the process with SIGBUS (no exception can be raised instead); writing to
    it may give wrong numbers.

    Raises:
        FileNotFoundError: no such file (a ``StoreNotFound``, with
            ``errno`` set).
        IsADirectoryError: the path is a directory.
        TypeError: an argument that must be an integer (``skip_rows``,
            ``chunk_size``, ``num_threads``, ``max_rows``, ``usecols``
            entries) is not one (floats are not truncated).
        ValueError: a token is not a number, rows differ in column count, a
            line holds a lone CR, the file is compressed, or an argument is
            invalid (the message names file, line and column).
    """
    dtype = np.dtype(dtype)
    if dtype not in (np.dtype(np.float64), np.dtype(np.float32)):
        raise ValueError(f"loadtxt produces float64 or float32, not {dtype}")
    path = os.fsdecode(filepath)
    skip_rows = _index(skip_rows, "skip_rows")
    chunk_size = _index(chunk_size, "chunk_size")
    num_threads = _index(num_threads, "num_threads")
    if max_rows is not None:
        max_rows = _index(max_rows, "max_rows")
    if usecols is not None:
        usecols = _usecols(usecols)
    # A missing file is the native reader's StoreNotFound (a
    # FileNotFoundError with errno set).
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, "is a directory, not a text file", path)
    if skip_rows < 0 or num_threads < 0 or chunk_size < 0:
        raise ValueError("skip_rows, chunk_size and num_threads must be non-negative")
    if max_rows is not None and max_rows < 0:
        raise ValueError(f"max_rows must be non-negative, got {max_rows}")
    if usecols is not None:
        big = next((c for c in usecols if not -_BIG <= c < _BIG), None)
        if big is not None:
            raise ValueError(f"usecols entry {big} is out of range")
    # Counts past any file's size mean "all"; capped to what the native
    # side takes. A chunk hint in bytes: ~64 bytes per line.
    skip_rows = min(skip_rows, _BIG)
    max_rows = None if max_rows is None else min(max_rows, _BIG)
    num_threads = min(num_threads, _BIG)
    chunk_bytes = min(chunk_size * 64, _BIG)
    return _native.loadtxt(
        path, _byte(comment, "comment"), _byte(delimiter, "delimiter"),
        skip_rows, usecols, max_rows, num_threads, chunk_bytes,
        dtype == np.float32,
    )


def npy_header(path):
    """The validated header of a ``.npy`` file: ``{'version', 'dtype',
    'fortran_order', 'shape', 'data_offset', 'payload_bytes'}``. Reads only
    the header bytes, so ``path`` must be a regular file (a pipe or FIFO is
    refused with a clear error; :func:`load_npy` reads one).

    Raises:
        FileNotFoundError: no such file (a ``StoreNotFound``, with
            ``errno`` set).
        IsADirectoryError: the path is a directory.
        ValueError: the header is malformed.
    """
    path = os.fsdecode(path)
    _is_stream(path)  # a directory is an IsADirectoryError, as in np.load
    return _header(_native.npy_header(path))


def _header(h):
    return {
        "version": tuple(h["version"]),
        "dtype": _identity_dtype(h["descr"]),
        "fortran_order": bool(h["fortran_order"]),
        "shape": tuple(h["shape"]),
        "data_offset": int(h["data_offset"]),
        "payload_bytes": int(h["payload_bytes"]),
    }


def _read(path, header, rows):
    dtype = header["dtype"]
    shape = header["shape"]
    if rows is not None:
        shape = (rows, *shape[1:])
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    raw = _native.read_bytes_at(os.fspath(path), header["data_offset"],
                                count * dtype.itemsize)
    order = "F" if header["fortran_order"] else "C"
    return np.ndarray(shape, dtype=dtype, buffer=raw, order=order)


def _is_stream(path):
    """Whether ``path`` is something other than a regular file (a pipe,
    FIFO or device), read by streaming, not by offset. A directory is an
    ``IsADirectoryError`` (what ``np.load`` raises); a path that cannot be
    stat'ed is left to the native reader's error, which names it."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # ValueError: a NUL in the path
        return False
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory, not a .npy file", path)
    return not stat.S_ISREG(mode)


def _read_stream(path, rows):
    """A ``.npy`` from a pipe or FIFO: read whole, then viewed as the
    array (or its first ``rows`` rows)."""
    data = bytearray()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            data += chunk
    h = _header(_native.npy_header_of_bytes(path, bytes(data[:1 << 21])))
    shape = h["shape"]
    if rows is not None:
        _check_prefix(path, h, rows)
        shape = (rows, *shape[1:])
    dtype = h["dtype"]
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    need = count * dtype.itemsize
    if len(data) - h["data_offset"] < need:
        raise ValueError(
            f"{path}: the payload needs {need} bytes, the stream holds "
            f"{max(len(data) - h['data_offset'], 0)}")
    order = "F" if h["fortran_order"] else "C"
    return np.ndarray(shape, dtype=dtype, buffer=data, offset=h["data_offset"],
                      order=order)


def load_npy(path):
    """The whole array of a ``.npy`` file, with its stored dtype and order
    (what ``np.load(path)`` returns, for numeric and structured dtypes).
    A pipe or FIFO is read whole, then viewed as the array.

    Raises:
        FileNotFoundError: no such file (a ``StoreNotFound``, with
            ``errno`` set).
        IsADirectoryError: the path is a directory.
        ValueError: the header is malformed or the payload is short.
    """
    path = os.fsdecode(path)
    if _is_stream(path):
        return _read_stream(path, None)
    return _read(path, npy_header(path), None)


def load_npy_prefix(path, rows):
    """The first ``rows`` rows of a C-order ``.npy`` array, reading nothing
    past them (a cheap preview of a huge file, or a memory-bounded first
    chunk).

    A pipe or FIFO is read whole, then its first rows are returned.

    Raises:
        IsADirectoryError: the path is a directory.
        TypeError: ``rows`` is not an integer.
        ValueError: ``rows`` exceeds the first dimension, the array is 0-d,
            or the file is Fortran-ordered (its rows are not contiguous).
    """
    rows = _index(rows, "rows")
    path = os.fsdecode(path)
    if _is_stream(path):
        return _read_stream(path, rows)
    h = npy_header(path)
    _check_prefix(path, h, rows)
    return _read(path, h, rows)


def _check_prefix(path, h, rows):
    if not h["shape"]:
        raise ValueError(f"{path}: a 0-d array has no rows")
    if h["fortran_order"] and len(h["shape"]) > 1:
        raise ValueError(
            f"{path}: a prefix read needs a C-order array, but the file is Fortran-ordered"
        )
    if not 0 <= rows <= h["shape"][0]:
        raise ValueError(f"{path}: asked for {rows} rows, the array has {h['shape'][0]}")
