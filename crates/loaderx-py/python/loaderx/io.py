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
import os

import numpy as np

from . import _native
from .zrecord import _identity_dtype

__all__ = ["loadtxt", "npy_header", "load_npy", "load_npy_prefix"]


def _byte(value, name):
    if value is None:
        return None
    if isinstance(value, str):
        if len(value) != 1 or not value.isascii():
            raise ValueError(f"{name} must be a single ASCII character, got {value!r}")
        value = value.encode()
    if len(value) != 1 or value[0] > 0x7F:
        raise ValueError(f"{name} must be a single ASCII character, got {value!r}")
    return value[0]


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
        usecols (sequence of int, optional): columns to keep, in output
            order; negative indices count from the last column, and a
            column may be named more than once (as in NumPy).
        max_rows (int, optional): read at most this many data rows.
        dtype: ``np.float64`` (default) or ``np.float32``.

    Returns:
        np.ndarray: shape ``(rows, columns)``; ``(0, 0)`` for a file without
        data rows.

    Lines end with LF or CRLF. Unlike ``numpy.loadtxt``, a lone CR (an old
    Mac line ending) is an error rather than a line end, and compressed
    files (gzip, bzip2, xz, zstd) are refused rather than decompressed.

    Raises:
        FileNotFoundError: no such file.
        IsADirectoryError: the path is a directory.
        ValueError: a token is not a number, rows differ in column count, a
            line holds a lone CR, the file is compressed, or an argument is
            invalid (the message names file, line and column).
    """
    dtype = np.dtype(dtype)
    if dtype not in (np.dtype(np.float64), np.dtype(np.float32)):
        raise ValueError(f"loadtxt produces float64 or float32, not {dtype}")
    path = os.fspath(filepath)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not found")
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, "is a directory, not a text file", path)
    if int(skip_rows) < 0 or int(num_threads) < 0 or int(chunk_size) < 0:
        raise ValueError("skip_rows, chunk_size and num_threads must be non-negative")
    if max_rows is not None and int(max_rows) < 0:
        raise ValueError(f"max_rows must be non-negative, got {max_rows}")
    if usecols is not None:
        usecols = [int(c) for c in usecols]
    # A hint in bytes: ~64 bytes per line.
    chunk_bytes = int(chunk_size) * 64 if chunk_size else 0
    return _native.loadtxt(
        path, _byte(comment, "comment"), _byte(delimiter, "delimiter"),
        int(skip_rows), usecols, None if max_rows is None else int(max_rows),
        int(num_threads), chunk_bytes, dtype == np.float32,
    )


def npy_header(path):
    """The validated header of a ``.npy`` file: ``{'version', 'dtype',
    'fortran_order', 'shape', 'data_offset', 'payload_bytes'}``. Reads only
    the header bytes."""
    h = _native.npy_header(os.fspath(path))
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


def load_npy(path):
    """The whole array of a ``.npy`` file, with its stored dtype and order
    (what ``np.load(path)`` returns, for numeric and structured dtypes)."""
    return _read(path, npy_header(path), None)


def load_npy_prefix(path, rows):
    """The first ``rows`` rows of a C-order ``.npy`` array, reading nothing
    past them (a cheap preview of a huge file, or a memory-bounded first
    chunk).

    Raises:
        ValueError: ``rows`` exceeds the first dimension, the array is 0-d,
            or the file is Fortran-ordered (its rows are not contiguous).
    """
    h = npy_header(path)
    rows = int(rows)
    if not h["shape"]:
        raise ValueError(f"{path}: a 0-d array has no rows")
    if h["fortran_order"] and len(h["shape"]) > 1:
        raise ValueError(
            f"{path}: a prefix read needs a C-order array, but the file is Fortran-ordered"
        )
    if not 0 <= rows <= h["shape"][0]:
        raise ValueError(f"{path}: asked for {rows} rows, the array has {h['shape'][0]}")
    return _read(path, h, rows)
