"""Train dictionaries for ``zstd_dict`` stores.

``train_dict`` accepts a NumPy array, an iterable of records, or a typed store
and returns standalone dictionary bytes sized by a named tier. Pass those bytes
to ``DenseStore`` or ``RaggedStore`` (``dict_bytes=``) when creating the store;
dictionary training is always an explicit step. Training runs natively with the
GIL released.
"""

from pathlib import Path
import math

import numpy as np

from . import _native
from .zrecord import DenseStore, RaggedStore, _dict_tier

__all__ = ["train_dict"]


def _sample_count(total, item_bytes, tier=None):
    """Records to train on: the tier's byte budget in records, capped by the
    record count."""
    samples = _dict_tier(tier)["samples"]
    per = max(item_bytes, 1)
    return max(1, min(total, max(1, samples // per)))


class EmptySource(ValueError, IndexError):
    """``train_dict`` was given an empty array. A ``ValueError``, and also
    an ``IndexError``: loaderx 1.7.2 indexed its first row and raised one."""


def _pack_samples(source, tier=None):
    """A strided training sample of ``source`` as ``(uint8 buffer, sizes)``."""
    if isinstance(source, np.ndarray):
        if source.ndim == 0 or len(source) == 0:
            raise EmptySource(
                f"train_dict needs at least one record, got an array of shape {source.shape}"
            )
        itemsize = math.prod(source.shape[1:]) * np.dtype(source.dtype).itemsize
        k = _sample_count(len(source), max(itemsize, 1), tier)
        idx = np.unique(np.linspace(0, len(source) - 1, k).astype(np.int64))
        sample = np.ascontiguousarray(source[idx])
        row = math.prod(sample.shape[1:]) * sample.dtype.itemsize
        return sample.reshape(-1).view(np.uint8), np.full(len(sample), row, dtype=np.uint64)
    if isinstance(source, (DenseStore, RaggedStore)):
        n = len(source)
        if n == 0:
            raise ValueError("cannot train a zstd dictionary on an empty store")
        if isinstance(source, DenseStore):
            item = source._row_bytes
        else:
            preview = source.__getitems__(np.arange(min(n, 32)))
            item = int(np.mean([record.nbytes for record in preview])) or 1
        k = _sample_count(n, item, tier)
        idx = np.unique(np.linspace(0, n - 1, min(k, n)).astype(np.int64))
        sample = source.__getitems__(idx)
        if isinstance(source, DenseStore):
            src = np.ascontiguousarray(sample).reshape(-1).view(np.uint8)
            return src, np.full(len(sample), source._row_bytes, dtype=np.uint64)
        src, offsets, _ = source._prepare_batch(sample)
        return src, np.diff(offsets)
    budget = _dict_tier(tier)["samples"]
    buf, total = [], 0
    for record in source:
        if isinstance(record, (bytes, bytearray, memoryview)):
            b = bytes(record)
        else:
            b = np.ascontiguousarray(np.asarray(record)).tobytes()
        buf.append(b)
        total += len(b)
        if total >= budget:
            break
    if not buf:
        raise ValueError("train_dict needs at least one record")
    sizes = np.fromiter((len(b) for b in buf), dtype=np.uint64, count=len(buf))
    return np.frombuffer(b"".join(buf), dtype=np.uint8), sizes


def train_dict(source, tier=None, path=None):
    """Train a zstd dictionary on ``source`` — a stacked numpy array, an
    iterable of records, or a DenseStore/RaggedStore — sized by ``tier``
    (``"fast"``, ``"balanced"`` (default) or ``"max"``).

    Args:
        source: numpy array, iterable of records, or typed store to train on.
        tier (str, optional): the ``DICT_TIERS`` preset.
        path (str | Path, optional): also write the dictionary to this file.

    Returns:
        bytes: the trained dictionary.

    Raises:
        ValueError: unknown tier or empty source.
        loaderx.zrecord.ZrecordError: training failed (too few or too small
            samples; a ``DictTrainingError``, also a ``ValueError``).
    """
    target = _dict_tier(tier)["size"]
    samples, sizes = _pack_samples(source, tier)
    d = _native.train_dict(np.ascontiguousarray(samples, dtype=np.uint8),
                           np.ascontiguousarray(sizes, dtype=np.uint64), target)
    if path is not None:
        Path(path).write_bytes(d)
    return d
