"""Batches of indices as a pure function of ``(seed, step)``.

``Sampler(length, batch_size, mode, seed=42)`` draws endless batches of
``uint64`` indices into ``0..length``; ``next()`` returns one, ``seek(step)``
repositions in O(1) so a run resumes exactly. The batch is computed natively
(GIL released). Extensions over loaderx 1.7.2: ``rank``/``world`` keyword
arguments shard every global batch across processes, ``step`` reports the
cursor, ``batch_at(step)`` computes any step without moving it.

Index streams are this package's own (a counter-based generator and a Feistel
permutation); they are deterministic per seed but are not the same numbers
loaderx 1.7.2 drew. Sequential mode is identical.
"""

from . import _native

__all__ = ["Sampler"]


class Sampler(_native.Sampler):
    """Endless index batches: sequential, IID (with replacement) or cyclic
    (without replacement; a fresh permutation each cycle)."""

    class Mode:
        SEQUENTIAL = 0
        IID = 1
        CYCLIC = 2  # without replacement, round-robin
