"""The endless, step-based prefetch loader over a dict of named streams.

``DataLoader(streams, num_workers=4, batch_size=256, prefetch_size=4, mode=2,
seed=42, transform=identity)`` behaves like loaderx 1.7.2's: gather threads
draw index batches from the sampler and gather every stream at them (the
native gather releases the GIL and fans out over every core; two such threads
overlap, so one's tail and Python work hide behind the other's decode),
``num_workers`` threads run ``transform`` (the collate step, on worker
threads), the consumer iterates forever. A worker exception re-raises in the consumer with its
traceback; ``close()`` never hangs on the pipeline's own waits; ``len()``
raises ``TypeError``. A loader still open when the interpreter exits is
closed first: what its threads are doing (a gather, a transform) finishes,
for up to 10 seconds in all, then the exit goes on.

Extensions (keyword-only): ``rank``/``world`` shard every global batch across
processes (rank ``r`` gets a contiguous slice, the ranks together draw exactly
the single-process stream); ``start_step`` resumes at a step (``loader.step``
is the step of the next batch returned); ``ordered`` (default ``True``)
delivers batches in step order, so a run is reproducible and resumable exactly;
``allocate`` supplies the memory each dense batch is gathered into (pinned
memory for a GPU, say), with no copy between; ``packed`` delivers ragged
streams as one array + offsets + shapes.
"""

import atexit
import math
import operator
import os
import sys
import threading
import time
import weakref

import numpy as np

from .zrecord import DenseStore, RaggedStore, _out_problem
from .zsampler import Sampler

__all__ = ["DataLoader"]


def _identity(batch):
    return batch


def _note(exc, text):
    """Adds ``text`` to ``exc``'s notes (shown under its traceback; Python
    3.11+), once."""
    try:
        if hasattr(exc, "add_note") and text not in getattr(exc, "__notes__", ()):
            exc.add_note(text)
    except Exception:  # noqa: BLE001 — a note must never replace the error
        pass


def _repr(obj):
    """``repr(obj)``, or a stand-in when it raises: a failure being recorded
    must not fail itself (the worker thread would die with the failure
    unrecorded, and the consumer would wait forever for its batch)."""
    try:
        return repr(obj)
    except Exception:  # noqa: BLE001 — any repr failure gets the stand-in
        return f"<{type(obj).__name__} object (its repr raised)>"


def _gather_allocated(allocate, name, ds):
    """A gather for the dense store ``ds`` (stream ``name``) into memory from
    ``allocate(name, shape, dtype)``; the batch carries the object it
    returned (an array, or e.g. a pinned torch tensor that ``numpy.asarray``
    views without a copy). ``claim(what, arr, obj)`` reserves the array's
    memory for the batch (see ``_Pipeline._claim_memory``) before it is
    written."""
    item_shape, dtype = ds.item_shape, ds.dtype

    def gather(idxs, claim):
        shape = (len(idxs), *item_shape)
        what = f"allocate({name!r}, {shape}, {dtype})"
        obj = allocate(name, shape, dtype)
        if obj is None:
            raise TypeError(f"{what} returned None (a missing return?)")
        if isinstance(obj, np.ndarray):
            arr = obj
        else:
            try:
                arr = np.asarray(obj)
            except Exception as exc:
                raise TypeError(
                    f"{what} returned a {type(obj).__name__} that NumPy cannot "
                    f"view in place ({exc})"
                ) from exc
            # A view of obj's memory comes back at the same address every
            # time; a copy (of a list, say) at a new one while the first is
            # alive.
            if arr.size and np.asarray(obj).ctypes.data != arr.ctypes.data:
                raise TypeError(
                    f"{what} returned a {type(obj).__name__}, which numpy.asarray "
                    "copies: the records would not reach it"
                )
        problem = _out_problem(arr, shape, dtype)
        if problem:
            raise ValueError(f"{what} returned an array that {problem}")
        claim(what, arr, obj)
        ds.gather_into(idxs, arr)
        return obj

    return gather


# Pipelines whose threads may be running, stopped at interpreter exit.
_LIVE = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()
# How long an exit waits, in all, for pipeline threads to finish what they
# are doing (a gather in flight, a transform).
_EXIT_TIMEOUT = 10.0


def _new_live_lock():
    """A forked child's own ``_LIVE_LOCK``: another thread of the parent
    (one building a DataLoader) may have held the parent's at the fork, and
    in the child, where that thread does not exist, nothing would release
    it: the child's first DataLoader, or its exit, waited for good."""
    global _LIVE_LOCK
    _LIVE_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_live_lock)


def _close_at_exit():
    """Stops every live pipeline when the interpreter exits, while its
    threads can still run (atexit handlers run before finalization). The
    threads are daemons: without this, finalization froze the ones that
    then tried to run Python (ending a gather, taking the pipeline's lock),
    and a loader's ``__del__`` during the teardown waited for a lock a
    frozen thread held: a script that ended with a gather in flight hung in
    about one exit in twelve."""
    with _LIVE_LOCK:
        live = list(_LIVE)
    deadline = time.monotonic() + _EXIT_TIMEOUT
    for p in live:
        try:
            p.close(timeout=max(0.0, deadline - time.monotonic()))
        except Exception:  # noqa: BLE001 — exiting; nothing to report to
            pass


atexit.register(_close_at_exit)

_WAIT = object()  # nothing to do yet
_STOP = object()  # the thread should end
_SKIP = object()  # claimed nothing worth doing; claim again


def _drive(ref, lock, cond, claim, do):
    """A pipeline thread: claims work under the lock, does it outside. While
    it waits it holds only ``ref`` (a weak reference), the lock and the
    condition, so an unreachable pipeline (with its loader, and whatever
    cycle through the transform holds them) can still be collected; its
    DataLoader's __del__ then closes it, or ``ref`` dies and the thread ends."""
    while True:
        with lock:
            p = ref()
            if p is None:
                return
            got = claim(p)
            if got is _WAIT:
                del p
                cond.wait(_Pipeline._POLL)
                continue
        if got is _STOP:
            return
        if got is not _SKIP and not do(p, got):
            return
        del p, got


class _Pipeline:
    """State shared by the threads. The threads reference this object only
    weakly while they wait, and never the DataLoader, so dropping the last
    DataLoader reference closes the pipeline (through the cyclic collector
    when a transform refers back to the loader's owner).

    Batches are numbered by tickets, in the order the gather threads draw them
    from the sampler (under ``draw_lock``); ordered delivery is ticket order.
    That is step order unless someone moves ``loader.sampler``'s cursor
    mid-run (as the reference allows), in which case the batches drawn before
    the seek come out first and the new steps follow."""

    _POLL = 0.1
    _GATHERERS = 2

    def __init__(self, streams, sampler, transform, num_workers, capacity,
                 ordered, start_step, allocate=None, packed=frozenset()):
        self.streams = streams
        # Our stores gather from any number of threads at once. Any other
        # stream (duck-typed: __len__ + __getitems__) is called as the
        # reference's single gather thread calls it: all such streams of a
        # batch under one lock, one batch at a time, since wrappers over one
        # file handle (seek, then read), or one object under two names,
        # would mix up concurrent batches.
        #
        # With ``allocate``, a dense stream is gathered into memory the
        # caller supplies (``gather(idxs, claim)``); ``lent`` holds, per
        # batch not yet delivered, the address ranges of that memory, so a
        # buffer handed out again while a batch in the pipeline still owns it
        # is an error instead of two batches silently sharing bytes.
        self.gathers = [
            (name, _gather_allocated(allocate, name, ds), False, True)
            if allocate is not None and type(ds) is DenseStore
            else (name, ds.gather_packed, type(ds) is not RaggedStore, False) if name in packed
            else (name, ds.__getitems__, type(ds) not in (DenseStore, RaggedStore), False)
            for name, ds in streams.items()
        ]
        self.lent = {}  # ticket -> [(start, end, what)]
        self.foreign_lock = threading.Lock()
        self.sampler = sampler
        self.transform = transform
        self.capacity = capacity
        self.ordered = ordered
        # An RLock entered with ``with self.lock``: its C-level __enter__ has
        # no point where a Ctrl-C can land between taking the lock and the
        # with-block that releases it (Condition.__enter__ is Python code and
        # has one), and Condition.wait re-takes an RLock uninterruptibly.
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.stopped = False
        self.failure = None           # (exception, traceback)
        self.fail_ticket = None       # the ticket that failed, if known
        self.raw = {}                 # ticket -> (ticket, step, gathered batch) awaiting transform
        self.next_work = 0            # ordered: the ticket the transform takes next
        self.done = {}                # ticket -> (step, transformed batch)
        self.started = 0              # batches the gather threads began (only grows)
        self.delivered = 0            # batches handed to the consumer
        self.tickets = 0              # tickets drawn (under draw_lock)
        self.next_ticket = 0          # ordered: the ticket delivered next
        self.next_step = start_step   # one past the step last returned
        self.taking = None            # a hand-over in progress, see _hand_over
        self.closing = []             # threads inside close() (nested: twice), see close
        self.draw_lock = threading.Lock()  # (ticket, step, indices) drawn as one
        self.pid = os.getpid()             # the threads live in this process
        # Two gather threads: while one waits out the tail of its gather (the
        # last job on one core) or does the Python work around it, the other
        # keeps every core decoding. Ordered delivery is by ticket, so
        # batches still come out in sampler order.
        ref = weakref.ref(self)
        self.threads = [
            threading.Thread(target=_drive, name=f"loaderx-gather-{i}", daemon=True,
                             args=(ref, self.lock, self.cond,
                                   _Pipeline._claim_gather, _Pipeline._do_gather))
            for i in range(self._GATHERERS)
        ]
        self.threads += [
            threading.Thread(target=_drive, name=f"loaderx-transform-{i}", daemon=True,
                             args=(ref, self.lock, self.cond,
                                   _Pipeline._claim_work, _Pipeline._do_work))
            for i in range(num_workers)
        ]
        with _LIVE_LOCK:
            _LIVE.add(self)
        started = []
        try:
            for t in self.threads:
                t.start()
                started.append(t)
        except BaseException:
            # Threads that did start must not run on with the stores.
            self.threads = started
            self.close(timeout=5.0)
            raise

    def _fail(self, exc, ticket=None, during="the transform"):
        """Records a failure at ``ticket`` (raised ``during`` what). In
        ordered mode the batches before it are still finished and delivered
        first (as the Rust loader does), so where an error surfaces does not
        depend on thread timing."""
        if isinstance(exc, StopIteration):
            # Raised from next(), it would end the consumer's for loop as if
            # the endless loader were exhausted (PEP 479's reasoning).
            err = RuntimeError(f"{during} raised {_repr(exc)}")
            err.__cause__ = exc
            exc = err
        with self.lock:
            if self.stopped:
                return  # closed: nobody to tell
            earlier = ticket is not None and (self.fail_ticket is None
                                              or ticket < self.fail_ticket)
            if self.failure is None or earlier:
                # Kept with the traceback it has now: re-raising the same
                # object would otherwise grow its traceback on every call.
                self.failure = (exc, exc.__traceback__)
                self.fail_ticket = ticket
            if not self.ordered or self.fail_ticket is None:
                self.stopped = True
            self.cond.notify_all()

    def _after_failure(self, ticket):
        """Whether ``ticket`` need not be produced: it is at or past a failed
        one (called with the lock held)."""
        return self.failure is not None and (self.fail_ticket is None
                                             or ticket >= self.fail_ticket)

    # Thread bodies. A thread holds the pipeline only while it works on a
    # batch, and waits for work through the lock and condition alone (see
    # _drive): a transform that refers back to the loader's owner (e.g.
    # ``transform=self.collate``) would otherwise make the pipeline, the
    # loader and the owner a cycle rooted in the live threads, and a loader
    # dropped without close() would keep its threads and stores forever.

    def _claim_gather(self):
        """(Lock held.) Reserves the next batch, or says to wait or stop."""
        if self.stopped or self.failure is not None:
            return _STOP  # no new batches once one failed
        if self.started - self.delivered >= self.capacity:
            return _WAIT
        self.started += 1
        return None

    def _do_gather(self, _):
        """Draws and gathers one batch; False when the thread should end."""
        ticket = step = name = None
        try:
            with self.draw_lock:
                step, idxs = self.sampler._draw()
                ticket = self.tickets
                self.tickets += 1
            got = {}
            for name, gather, foreign, allocated in self.gathers:
                if allocated:
                    got[name] = gather(idxs, lambda what, arr, obj:
                                       self._claim_memory(ticket, what, arr, obj))
                elif not foreign:
                    got[name] = gather(idxs)
            if len(got) < len(self.gathers):
                with self.foreign_lock:
                    for name, gather, foreign, _ in self.gathers:
                        if foreign:
                            got[name] = gather(idxs)
            name = None
            batch = {name: got[name] for name, *_ in self.gathers}  # stream order
            with self.lock:
                if self.stopped:
                    return False
                self.raw[ticket] = (ticket, step, batch)
                self.cond.notify_all()
            return True
        except BaseException as exc:  # noqa: BLE001 — re-raised in the consumer
            if step is not None:
                _note(exc, f"while gathering stream {_repr(name)} for step {step}"
                      if name is not None else f"while gathering step {step}")
            with self.lock:
                self.lent.pop(ticket, None)  # this batch will never be delivered
            self._fail(exc, ticket, "gathering the batch")
            return False

    def _claim_memory(self, ticket, what, arr, obj):
        """Reserves ``arr``'s bytes for batch ``ticket`` until it is
        delivered or dropped; raises if a batch still in the pipeline owns
        any of them. The entry holds ``obj``, so the memory cannot be freed
        and handed out again (by malloc, or PyTorch's host cache) while the
        entry stands, even if the transform does not keep it."""
        start = arr.ctypes.data
        end = start + arr.nbytes
        if start == end:
            return
        with self.lock:
            for ranges in self.lent.values():
                for lo, hi, owner, _ in ranges:
                    if lo < end and start < hi:
                        raise ValueError(
                            f"{what} returned memory that a batch still in the "
                            f"pipeline owns (from {owner}): allocate must return "
                            "memory nothing else uses until the consumer is done "
                            "with the batch it fills"
                        )
            self.lent.setdefault(ticket, []).append((start, end, what, obj))

    def _claim_work(self):
        """(Lock held.) Takes a gathered batch, or says to wait or stop."""
        if self.stopped:
            return _STOP
        if not self.raw:
            return _WAIT
        if self.ordered:
            # The transform gets the batches in step order, as the
            # reference's one gather thread hands them over: the two gather
            # threads finish out of order, and a stateful transform (a
            # counter, augmentation drawing from a global RNG) saw step
            # k + 1 before step k, so its k-th call was not step k's and a
            # run did not reproduce. A ticket whose gather failed never
            # arrives: the batches before it are transformed, and the
            # consumer then raises the failure and stops the workers.
            item = self.raw.pop(self.next_work, None)
            if item is None:
                return _WAIT
            self.next_work += 1
        else:
            item = self.raw.pop(min(self.raw))
        if self._after_failure(item[0]):
            self.lent.pop(item[0], None)
            return _SKIP  # its result would never be delivered
        return item

    def _do_work(self, item):
        """Transforms one batch; False when the thread should end. A failing
        transform does not end the thread: in ordered mode the batches before
        the failed one must still be transformed and delivered first, and a
        worker that quit could leave one of them with nobody to run it."""
        ticket, step, batch = item
        del item
        try:
            out = self.transform(batch)
        except BaseException as exc:  # noqa: BLE001 — re-raised in the consumer
            _note(exc, f"in the DataLoader's transform, at step {step}")
            del batch
            with self.lock:
                self.lent.pop(ticket, None)
            self._fail(exc, ticket)
            return True
        del batch
        with self.lock:
            if self.stopped:
                return False
            self.done[ticket] = (step, out)
            self.cond.notify_all()
        return True

    def next(self):
        if os.getpid() != self.pid:
            # Checked before the lock, which a parent thread may have held
            # at the fork.
            raise RuntimeError(
                "this DataLoader's threads run in the process that created "
                f"it ({self.pid}); create a DataLoader in this forked process"
            )
        with self.lock:
            if self.taking is not None:
                # A hand-over interrupted (Ctrl-C) before it returned: its
                # batch was never seen, so it is this call's.
                return self._hand_over()
            while True:
                if self.ordered:
                    if self.next_ticket in self.done:
                        ticket = self.next_ticket
                        break
                elif self.done:
                    ticket = min(self.done)
                    break
                if self.failure is not None and (not self.ordered
                                                 or self._after_failure(self.next_ticket)):
                    self.stopped = True  # every batch before it was delivered
                    self.cond.notify_all()
                    exc, tb = self.failure
                    try:
                        raise exc.with_traceback(tb)
                    finally:
                        # This frame joins the exception's traceback: its
                        # locals must not hold the exception (a cycle).
                        del exc, tb
                if self.stopped:
                    raise RuntimeError("the DataLoader is closed")

                self.cond.wait(self._POLL)
            step, out = self.done[ticket]
            self.taking = (ticket, step, self.delivered + 1, out)
            return self._hand_over()

    def _hand_over(self):
        """Completes the hand-over journaled in ``taking`` (lock held) and
        returns its batch. A KeyboardInterrupt can land between any two
        statements of the consumer's thread; every statement here sets an
        absolute value and ``taking`` is cleared last, so an interrupted
        hand-over is finished by the next call, which returns the batch,
        instead of a batch vanishing with the counters half updated (which
        left ordered mode waiting forever for it)."""
        ticket, step, delivered, out = self.taking
        self.done.pop(ticket, None)
        self.lent.pop(ticket, None)  # the consumer's now
        self.delivered = delivered
        if self.next_ticket <= ticket:
            self.next_ticket = ticket + 1
        self.next_step = step + 1
        self.cond.notify_all()
        self.taking = None
        return out

    def close(self, timeout=30.0):
        """Stops the threads and waits for them up to ``timeout`` seconds in
        all (a transform still running past that finishes on its own;
        ``None``, or a limit longer than ``threading.TIMEOUT_MAX`` such as
        ``math.inf``: as long as they take)."""
        if timeout is not None and not (type(timeout) is float and timeout < 1e9):
            # A plain float below 1e9 s (the default, which also comes here
            # from __del__ at exit) needs no check; anything else is checked.
            timeout = _close_timeout(timeout)
        if os.getpid() != self.pid:
            return  # a forked child: the threads (and their lock) are the parent's
        if sys.is_finalizing():
            # The interpreter is tearing down (past _close_at_exit, or
            # its wait ran out): a pipeline thread that ran Python since is
            # frozen for good, perhaps holding the lock, so waiting for the
            # lock or the threads would hang the exit. Only flag the stop.
            self.stopped = True
            return
        current = threading.current_thread()
        # A caller that already holds the lock (a signal handler, or a
        # finalizer the cyclic collector runs, landing while next() or a
        # pipeline thread held it) must not wait for threads that need that
        # lock to see the stop: it only stops them, and they end on their own.
        held = self.lock._is_owned()
        with self.lock:
            self.closing.append(current)
            self.stopped = True
            self.raw.clear()
            self.done.clear()
            self.lent.clear()
            self.taking = None
            # The failure's traceback holds frames whose locals are this
            # pipeline and its loader: a cycle that kept the stores (fds,
            # maps) and the failed batch until the cyclic collector ran,
            # forever where it is disabled.
            self.failure = None
            self.cond.notify_all()
        try:
            if held:
                return
            mine = current in self.threads
            deadline = None if timeout is None else time.monotonic() + timeout
            for t in self.threads:
                if t is current:
                    continue
                if mine:
                    # close() from the transform or allocate (or a finalizer
                    # run there): another pipeline thread already in close()
                    # may be waiting for this one, so it is not waited for.
                    # Each registers before it looks, so of two such threads
                    # at least one sees the other: no cycle of waits.
                    with self.lock:
                        if t in self.closing:
                            continue
                t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        finally:
            with self.lock:
                self.closing.remove(current)


def _close_timeout(timeout):
    """``close``'s limit in seconds, or None for no limit; checked before
    anything is stopped, so a wrong value changes nothing."""
    if timeout is None:
        return None
    if isinstance(timeout, (bool, np.bool_)) or not isinstance(timeout, (int, float, np.integer, np.floating)):
        raise TypeError(f"close: timeout must be a number of seconds or None, not {type(timeout).__name__}")
    if timeout != timeout:
        raise ValueError("close: timeout is NaN; give a number of seconds or None")
    # Thread.join refuses waits past TIMEOUT_MAX (OverflowError): such a
    # limit, math.inf or a huge int included, is no limit.
    return None if timeout >= threading.TIMEOUT_MAX else float(timeout)


# More transform threads than any machine starts: a larger num_workers (2**63,
# which loaderx 1.7.2 hangs on building its thread list) is refused.
_MAX_WORKERS = 1 << 16


def _num_workers(value):
    """``num_workers`` as loaderx 1.7.2 reads it (``max(1, int(value))``:
    ``"2"`` and ``2.5`` included), with errors that name it."""
    try:
        n = int(value)
    except (TypeError, ValueError, OverflowError) as exc:
        kind = next(k for k in (OverflowError, ValueError, TypeError) if isinstance(exc, k))
        raise kind(f"num_workers: {exc} (got {value!r})") from None
    if n > _MAX_WORKERS:
        raise ValueError(f"num_workers={n} transform threads: at most {_MAX_WORKERS}")
    return max(1, n)


def _prefetch_size(value):
    """``prefetch_size`` as a count of batches. loaderx 1.7.2 passes it to
    ``Queue(maxsize=...)``, which takes any number (inf, NaN and values
    <= 0 as no bound) and hangs its gather thread on anything else. Here a
    value <= 0 or NaN is 0 and inf is unbounded in practice (2**63), as a
    huge int is; a non-number is refused by name."""
    if isinstance(value, (int, float, np.integer, np.floating, np.bool_)):
        if value != value or value <= 0:
            return 0
        return 2**63 if value == math.inf else int(value)
    try:
        return max(0, operator.index(value))
    except TypeError:
        raise TypeError(
            f"prefetch_size must be a number of batches, got {type(value).__name__} {value!r}"
        ) from None


class DataLoader:
    """Endless shuffled batches from named stores, prefetched by threads.

    ``for batch in DataLoader({"image": images, "label": labels}): ...``
    yields ``transform({name: values})`` forever; stop with ``close()`` or a
    ``with`` block. The arguments are described under ``__init__``; the
    module's docstring says how the pipeline runs.
    """

    def __init__(self, streams, num_workers=4, batch_size=256, prefetch_size=4,
                 mode=2, seed=42, transform=_identity, *, rank=None, world=None,
                 start_step=0, ordered=True, allocate=None, packed=()):
        """Initialize a DataLoader over one or more named streams.

        A batch is a dict ``{name: values}``: the stacked ``(batch_size,
        *item_shape)`` array for a dense stream, a list of per-record arrays
        for a ragged one. Every stream is gathered with the same indices.

        Args:
            streams (dict[str, DenseStore | RaggedStore]): Named streams, all
                holding the same number of records. Any other object with
                ``__len__`` and ``__getitems__(uint64 indices)`` works too;
                its ``__getitems__`` is called from one thread at a time.
            num_workers (int): Threads that run ``transform`` (at least 1).
            batch_size (int): Indices per global batch.
            prefetch_size (int): Finished batches kept ready ahead of the
                consumer.
            mode (int): Sampler mode (``Sampler.Mode``); cyclic by default.
            seed (int): Sampler seed.
            transform (callable): Maps a batch dict to the value yielded.
            rank (int, optional), world (int, optional): Shard: this process
                takes lanes ``B*rank//world .. B*(rank+1)//world`` of each
                global batch. Both or neither.
            start_step (int): First step to produce (exact resume).
            ordered (bool): Yield batches in step order (default) rather than
                as workers finish.
            allocate (callable, optional): ``allocate(name, shape, dtype)``
                returns the memory a dense stream's batch is gathered into:
                a NumPy array, or an object ``numpy.asarray`` views without
                copying (a CPU torch tensor), writable and C-contiguous, of
                exactly that shape and dtype. The batch then holds that
                object, filled. Called on the gather threads (two, so it must
                be thread-safe), once per dense stream and batch; ragged and
                foreign streams are gathered as usual. Each call must return
                memory nothing else uses until the consumer is done with the
                batch it fills (and any asynchronous copy from it has
                finished): up to ``prefetch_size + num_workers`` batches wait
                in the pipeline, besides those the consumer holds. Memory a
                batch in the pipeline still owns is refused with an error.
                Hand buffers out from a free list the consumer gives them
                back to, not from a fixed ring in turn: the two gather
                threads call ``allocate`` in no fixed step order, so a ring
                sized to that bound can hand out a buffer whose batch the
                consumer still holds.
                For a CUDA model, return pinned tensors
                (``torch.empty(shape, dtype=..., pin_memory=True)``, which
                PyTorch recycles safely) and the host-to-device copy runs
                asynchronously with no extra copy on the way.
            packed (iterable of str, optional): Ragged streams to deliver packed, as
                ``RaggedStore.gather_packed`` returns them: ``(values,
                offsets, shapes)``, one array for the batch instead of a
                list of per-record arrays (``offsets`` is what
                variable-length attention kernels call ``cu_seqlens``).

        Raises:
            ValueError: If ``streams`` is empty, the streams differ in record
                count, the sampler arguments (or ``start_step``) are invalid,
                or ``packed`` names a stream that is not a ``RaggedStore``.
            TypeError: If ``streams`` is not a dict (or ``(name, store)``
                pairs), a stream lacks ``__len__`` or ``__getitems__``, or
                ``allocate`` is not callable.

        An exception from a stream's gather or from ``transform`` re-raises
        in the consumer with a note naming the stream and step (Python 3.11+).
        """
        if isinstance(streams, (DenseStore, RaggedStore, np.ndarray)):
            raise TypeError(
                f"streams must be a dict {{name: store}}, got a {type(streams).__name__}; "
                "e.g. DataLoader({'x': store})"
            )
        try:
            self.streams = dict(streams)
        except (TypeError, ValueError) as exc:
            # The type dict() raised (as loaderx 1.7.2, which calls it too).
            raise type(exc)(
                "streams must be a dict {name: store} (or (name, store) pairs), "
                f"got a {type(streams).__name__}"
            ) from exc
        if not self.streams:
            raise ValueError("need at least one stream")
        for name, ds in self.streams.items():
            if not (hasattr(ds, "__len__") and hasattr(ds, "__getitems__")):
                raise TypeError(
                    f"stream {name!r} is a {type(ds).__name__}; a stream needs "
                    "__len__ and __getitems__ (a DenseStore or RaggedStore)"
                )
        lengths = {name: len(ds) for name, ds in self.streams.items()}
        if len(set(lengths.values())) != 1:
            raise ValueError(
                f"all streams must hold the same number of records, got {lengths}"
            )
        length = next(iter(lengths.values()))
        if (rank is None) != (world is None):
            raise ValueError("rank and world must be given together")
        num_workers = _num_workers(num_workers)
        prefetch_size = _prefetch_size(prefetch_size)
        if rank is None:
            sampler = Sampler(length, batch_size, mode, seed)
        else:
            sampler = Sampler(length, batch_size, mode, seed, rank=rank, world=world)
        try:
            # Like Sampler.seek: an integer, never a truncated float.
            start_step = operator.index(start_step)
        except TypeError:
            raise TypeError(
                f"start_step must be an integer, got {type(start_step).__name__} {start_step!r}"
            ) from None
        if not 0 <= start_step < 2**63:
            raise ValueError(f"start_step must be in [0, 2**63), got {start_step}")
        sampler.seek(start_step)
        if allocate is not None and not callable(allocate):
            raise TypeError(f"allocate must be callable, got {type(allocate).__name__}")
        if packed is None:
            packed = ()
        elif isinstance(packed, str):
            packed = (packed,)
        try:
            packed = frozenset(packed)
        except TypeError:
            raise TypeError(
                f"packed must be stream names (a str or an iterable of them), "
                f"got {type(packed).__name__} {packed!r}"
            ) from None
        for name in sorted(packed, key=str):
            if not isinstance(self.streams.get(name), RaggedStore):
                what = ("no such stream" if name not in self.streams
                        else f"a {type(self.streams[name]).__name__}")
                raise ValueError(
                    f"packed names {name!r}, which is {what}: only RaggedStore "
                    f"streams can be packed (streams: {sorted(self.streams)})"
                )
        self.sampler = sampler
        self._pipeline = _Pipeline(
            self.streams, sampler, transform, num_workers,
            capacity=max(1, prefetch_size + num_workers), ordered=bool(ordered),
            start_step=int(start_step), allocate=allocate, packed=packed,
        )

    @property
    def step(self):
        """One past the step of the last batch returned (``start_step``
        before the first): in ordered mode the step of the next batch, to
        pass as ``start_step`` to resume exactly. (After a
        ``loader.sampler.seek(k)`` mid-run, the batches already drawn come
        out first, then step ``k`` on.)"""
        return self._pipeline.next_step

    def __len__(self):
        """Raises a TypeError since an endless loader has no length."""
        raise TypeError("Eternal loader has no length.")

    def __iter__(self):
        return self

    def __next__(self):
        # A raised failure's traceback keeps this frame: it must not hold
        # the loader, or the loader, its pipeline and the stored failure
        # would form a cycle that only the cyclic collector frees. So `self`
        # is dropped from the frame once the step is done, not before: a
        # temporary loader (`DataLoader(...).__next__()`) has no other
        # reference, and dropping it first closed it mid-step.
        try:
            return self._pipeline.next()
        finally:
            del self

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.close()

    def close(self, timeout=30.0):
        """Stop the pipeline threads and wait for them, up to ``timeout``
        seconds in all (a transform still running then finishes on its own,
        its result dropped; ``None``, or a limit past
        ``threading.TIMEOUT_MAX`` such as ``math.inf``, waits as long as
        they take). A NaN or non-numeric limit is refused before anything
        stops. Idempotent."""
        pipeline = getattr(self, "_pipeline", None)
        if pipeline is not None:
            pipeline.close(timeout)

    def __del__(self):
        self.close()
