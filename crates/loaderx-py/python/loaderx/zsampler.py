"""Batches of indices as a pure function of ``(seed, step)``.

``Sampler(length, batch_size, mode, seed=42)`` draws endless batches of
``uint64`` indices into ``0..length``; ``next()`` returns one, ``seek(step)``
repositions in O(1) so a run resumes exactly. The batch is computed natively
(GIL released). Extensions over loaderx 1.7.2: ``rank``/``world`` keyword
arguments shard every global batch across processes, ``step`` reports the
cursor, ``batch_at(step)`` computes any step without moving it.

Index streams are this package's own (a counter-based generator and a Feistel
permutation); they are deterministic per seed but are not the same numbers
loaderx 1.7.2 drew (see docs/sampler.md). Sequential mode is identical
while ``step * batch_size < 2**64``.
"""

import operator

import numpy as np

from . import _native

__all__ = ["Sampler"]


def _u64(value, name):
    """``value`` as an int in ``[0, 2**64)``; the exception types are the
    reference's (TypeError, OverflowError), the message names ``name``."""
    try:
        # NumPy's bool has no __index__; loaderx 1.7.2's C call takes it as
        # 0 or 1, like Python's.
        v = int(value) if isinstance(value, np.bool_) else operator.index(value)
    except TypeError:
        raise TypeError(
            f"{name} must be an integer, got {type(value).__name__} {value!r}"
        ) from None
    if not 0 <= v < 2**64:
        raise OverflowError(f"{name} must be in [0, 2**64), got {v}")
    return v


def _next_via_next(self):
    """``__next__`` of a subclass that overrides ``next``."""
    return self.next()


class Sampler(_native.Sampler):
    """Endless index batches: sequential, IID (with replacement) or cyclic
    (without replacement; a fresh permutation each cycle)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # loaderx 1.7.2's ``__next__`` is ``return self.next()``: a subclass
        # that overrides ``next`` (offsets, filters, logs the batch) is
        # iterated through its override. The native ``__next__`` draws
        # directly, so such a subclass (that leaves ``__next__`` alone)
        # gets the reference's route. Found by the differential test
        # (session 15).
        for c in cls.__mro__:
            if c is Sampler:
                break
            if "__next__" in vars(c):
                break
            if "next" in vars(c):
                cls.__next__ = _next_via_next
                break

    def __init__(self, length, batch_size, mode, seed=42, *, rank=0, world=1):
        """Index batches over ``0..length``.

        Args:
            length (int): Records to draw from.
            batch_size (int): Indices per (global) batch.
            mode (int): ``Sampler.Mode.SEQUENTIAL`` (0), ``IID`` (1) or
                ``CYCLIC`` (2).
            seed (int): Seed of the IID and cyclic streams.
            rank, world (int): This process's shard of every global batch.

        Raises:
            ValueError: Zero length or batch size, an unknown mode, a bad shard.
            TypeError: An argument that is not an integer (named).
            OverflowError: A negative or too large value (named).
        """
        mode = _u64(mode, "mode")
        if mode > 255:  # OverflowError, as the reference's uint8_t conversion
            raise OverflowError(f"mode must be 0 (sequential), 1 (IID) or 2 (cyclic), got {mode}")
        if isinstance(batch_size, (bool, np.bool_)):
            # loaderx 1.7.2 sizes its index buffer with it: a TypeError there
            # (a bool length, mode or seed is taken as 0 or 1, as there).
            raise TypeError(f"batch_size must be an integer, got bool {batch_size!r}")
        self._init(_u64(length, "length"), _u64(batch_size, "batch_size"), mode,
                   _u64(seed, "seed"), rank=_u64(rank, "rank"), world=_u64(world, "world"))

    def seek(self, step):
        """Move the cursor to ``step`` (O(1)): resuming is a seek."""
        super().seek(_u64(step, "step"))

    def batch_at(self, step):
        """The batch of any ``step``, without moving the cursor."""
        return super().batch_at(_u64(step, "step"))

    class Mode:
        SEQUENTIAL = 0
        IID = 1
        CYCLIC = 2  # without replacement, round-robin
