"""DataLoader public behaviour: batch dicts over dense + ragged streams,
alignment, transform on worker threads, error propagation with traceback,
close, len(), and the sharding / resume extensions."""

import math
import threading
import time
import traceback

import numpy as np
import pytest

from loaderx.dataloader import DataLoader
from loaderx.zrecord import DenseStore, RaggedStore
from loaderx.zsampler import Sampler

from conftest import ours_only


def make_streams(n=100):
    x = np.arange(n * 6, dtype=np.float32).reshape(n, 2, 3)
    y = np.arange(n, dtype=np.int64)
    with DenseStore("x", x.dtype, x.shape[1:]) as s:
        s.append(x)
    with DenseStore("y", y.dtype, ()) as s:
        s.append(y)
    with RaggedStore("t", np.int32) as s:
        s.append([np.full(i % 5 + 1, i, np.int32) for i in range(n)])
    return x, {"x": DenseStore("x"), "y": DenseStore("y"), "t": RaggedStore("t")}


def close_all(streams):
    for s in streams.values():
        s.close()


def _threads_back_to(count, limit):
    """Waits (collecting cycles) until only ``count`` threads run."""
    import gc
    deadline = time.monotonic() + limit
    while threading.active_count() > count and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.05)
    assert threading.active_count() == count


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_batches_are_aligned(mode):
    x, streams = make_streams()
    with DataLoader(streams, batch_size=16, mode=mode, num_workers=2) as loader:
        for _, batch in zip(range(20), loader):
            assert set(batch) == {"x", "y", "t"}
            assert batch["x"].shape == (16, 2, 3) and batch["y"].shape == (16,)
            assert isinstance(batch["t"], list) and len(batch["t"]) == 16
            idx = batch["y"]
            np.testing.assert_array_equal(batch["x"], x[idx])
            for rec, i in zip(batch["t"], idx):
                assert rec.shape == (i % 5 + 1,) and (rec == i).all()
    close_all(streams)


def test_len_raises_type_error():
    _, streams = make_streams(10)
    loader = DataLoader(streams, batch_size=4)
    with pytest.raises(TypeError):
        len(loader)
    loader.close()
    close_all(streams)


def test_validation():
    with pytest.raises(ValueError):
        DataLoader({})
    a = DenseStore("a", np.uint8, (1,))
    a.append(np.zeros((3, 1), np.uint8))
    b = DenseStore("b", np.uint8, (1,))
    b.append(np.zeros((4, 1), np.uint8))
    with pytest.raises(ValueError):
        DataLoader({"a": a, "b": b})
    a.close()
    b.close()


def test_transform_runs_on_worker_threads():
    _, streams = make_streams(50)
    main = threading.get_ident()
    seen = set()

    def collate(batch):
        seen.add(threading.get_ident())
        return {"input": batch["x"].reshape(len(batch["y"]), -1), "label": batch["y"]}

    loader = DataLoader(streams, batch_size=8, num_workers=3, transform=collate)
    for _ in range(10):
        out = next(loader)
        assert out["input"].shape == (8, 6)
    loader.close()
    assert seen and main not in seen
    close_all(streams)


def test_worker_exception_reraises_with_traceback():
    _, streams = make_streams(20)

    def boom(batch):
        raise KeyError("bad sample")

    loader = DataLoader(streams, batch_size=4, transform=boom)
    with pytest.raises(KeyError) as info:
        next(loader)
    frames = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert "boom" in frames
    loader.close()
    close_all(streams)


def test_close_never_hangs_with_full_queues():
    _, streams = make_streams(64)
    for _ in range(5):
        loader = DataLoader(streams, batch_size=8, prefetch_size=2, num_workers=4)
        next(loader)
        time.sleep(0.05)  # let every queue fill up
        t0 = time.monotonic()
        loader.close()
        assert time.monotonic() - t0 < 10
    # close before any batch, and twice
    loader = DataLoader(streams, batch_size=8)
    loader.close()
    loader.close()
    close_all(streams)


def test_endless_and_seeded():
    _, streams = make_streams(30)
    a = DataLoader(streams, batch_size=7, seed=1, num_workers=1)
    labels = [next(a)["y"] for _ in range(30)]  # 210 draws from 30 records: no end
    a.close()
    assert all(len(l) == 7 for l in labels)
    close_all(streams)


def test_torch_style_transform():
    """The README's CPU->device transform shape, with numpy standing in for
    torch when it is not installed."""
    try:
        import torch
        to_tensor = torch.from_numpy
    except ImportError:
        torch = None
        to_tensor = np.asarray
    x, streams = make_streams(40)
    del streams["t"]

    def to_device(batch):
        return {k: to_tensor(v) for k, v in batch.items()}

    loader = DataLoader(streams, batch_size=8, transform=to_device)
    for _ in range(5):
        b = next(loader)
        np.testing.assert_array_equal(np.asarray(b["x"]), x[np.asarray(b["y"])])
    loader.close()
    close_all(streams)


@ours_only
def test_ordered_resume_and_sharding():
    x, streams = make_streams(100)
    base = DataLoader(streams, batch_size=12, seed=9, num_workers=3)
    full = [next(base)["y"] for _ in range(12)]
    assert base.step == 12
    base.close()
    resumed = DataLoader(streams, batch_size=12, seed=9, start_step=7)
    for k in range(7, 12):
        np.testing.assert_array_equal(next(resumed)["y"], full[k])
    resumed.close()
    shards = [DataLoader(streams, batch_size=12, seed=9, rank=r, world=4) for r in range(4)]
    for k in range(5):
        parts = [next(s)["y"] for s in shards]
        assert all(len(p) == 3 for p in parts)
        np.testing.assert_array_equal(np.concatenate(parts), full[k])
    for s in shards:
        s.close()
    with pytest.raises(ValueError):
        DataLoader(streams, rank=1)
    close_all(streams)


@ours_only
def test_dropping_the_loader_stops_its_threads():
    _, streams = make_streams(20)
    before = threading.active_count()
    loader = DataLoader(streams, batch_size=4, num_workers=2)
    next(loader)
    del loader
    _threads_back_to(before, limit=10)
    close_all(streams)


@ours_only
def test_a_transform_raising_stopiteration_does_not_end_the_loop_silently():
    _, streams = make_streams(20)

    def stop(batch):
        raise StopIteration

    loader = DataLoader(streams, batch_size=4, transform=stop)
    with pytest.raises(RuntimeError, match="StopIteration") as info:
        for _ in loader:
            pass
    assert isinstance(info.value.__cause__, StopIteration)
    loader.close()
    close_all(streams)


@ours_only
def test_a_failure_reraised_again_and_again_keeps_its_traceback():
    _, streams = make_streams(20)

    def boom(batch):
        raise ValueError("bad")

    loader = DataLoader(streams, batch_size=4, transform=boom)
    depths = []
    for _ in range(50):
        with pytest.raises(ValueError) as info:
            next(loader)
        depths.append(len(traceback.extract_tb(info.value.__traceback__)))
    # The same failure each time, with the same traceback (not one grown by
    # every re-raise).
    assert len(set(depths[1:])) == 1 and depths[-1] <= depths[0] + 2, depths
    loader.close()
    close_all(streams)


@ours_only
def test_start_step_must_fit_the_step_counter():
    _, streams = make_streams(20)
    for bad in (-1, 2**63, 2**64 - 1):
        with pytest.raises(ValueError, match="start_step"):
            DataLoader(streams, batch_size=4, start_step=bad)
    close_all(streams)


def test_prefetch_size_inf_and_nan_are_accepted_as_the_reference_does():
    # loaderx 1.7.2 hands prefetch_size to Queue(maxsize=...), which takes
    # inf, -inf and NaN (no bound); ours raised int()'s OverflowError or
    # ValueError, naming no argument.
    _, streams = make_streams(20)
    for value in (math.inf, -math.inf, math.nan, np.float64(math.inf)):
        with DataLoader(streams, batch_size=4, prefetch_size=value) as loader:
            batch = next(loader)
        assert batch["y"].shape == (4,)
    close_all(streams)


@ours_only
def test_loader_arguments_are_checked_by_name():
    # The reference hangs on these (a prefetch_size its Queue cannot compare,
    # num_workers past any thread count) or raises int()'s bare message.
    _, streams = make_streams(20)
    cases = [
        ({"prefetch_size": None}, TypeError, "prefetch_size"),
        ({"prefetch_size": "3"}, TypeError, "prefetch_size"),
        ({"prefetch_size": object()}, TypeError, "prefetch_size"),
        ({"num_workers": math.inf}, OverflowError, "num_workers"),
        ({"num_workers": math.nan}, ValueError, "num_workers"),
        ({"num_workers": None}, TypeError, "num_workers"),
        ({"num_workers": 2**63}, ValueError, "num_workers"),
        ({"num_workers": 10**400}, ValueError, "num_workers"),
        ({"start_step": 2.5}, TypeError, "start_step"),
        ({"start_step": "3"}, TypeError, "start_step"),
        ({"start_step": math.inf}, TypeError, "start_step"),
        ({"packed": 5}, TypeError, "packed"),
        ({"packed": [["x"]]}, TypeError, "packed"),
    ]
    for kwargs, exc, name in cases:
        with pytest.raises(exc, match=name):
            DataLoader(streams, batch_size=4, **kwargs)
    # Integers of every kind still work.
    for kwargs in ({"num_workers": "2"}, {"num_workers": 2.5}, {"prefetch_size": np.uint8(2)},
                   {"prefetch_size": 2.5}, {"start_step": np.int64(3)}):
        with DataLoader(streams, batch_size=4, mode=0, **kwargs) as loader:
            assert next(loader)["y"].shape == (4,)
    with DataLoader(streams, batch_size=4, mode=0, start_step=np.uint16(2)) as loader:
        assert next(loader)["y"].tolist() == [8, 9, 10, 11]
    close_all(streams)


@ours_only
def test_close_waits_for_blocked_transforms_once_not_per_thread():
    _, streams = make_streams(40)
    release = threading.Event()

    def blocked(batch):
        release.wait(60)
        return batch

    loader = DataLoader(streams, batch_size=4, num_workers=4, transform=blocked)
    time.sleep(0.2)  # every worker is now inside the transform
    t0 = time.monotonic()
    loader.close(timeout=2.0)
    # One overall deadline: 4 blocked threads used to cost 4 x the timeout.
    assert time.monotonic() - t0 < 6.0
    release.set()
    close_all(streams)


@ours_only
@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
def test_a_forked_child_gathers_but_cannot_iterate_the_parents_loader():
    import os
    import signal
    x, streams = make_streams(100)
    big = np.zeros((600, 64, 64), np.float32)  # gathers far above the inline size
    with DenseStore("big", big.dtype, big.shape[1:], codec="zstd") as s:
        s.append(big)
    ro = DenseStore("big", read_only=True)
    loader = DataLoader(streams, batch_size=8)
    next(loader)
    assert ro[np.arange(600)].shape == (600, 64, 64)  # the parent's pool runs

    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            signal.alarm(30)  # a hang in the pool ends the child, not the test
            # A large gather through the inherited handle, and a fresh one.
            ok = ro[np.arange(600)].shape == (600, 64, 64)
            fresh = DenseStore("big", read_only=True)
            ok = ok and fresh[np.arange(599, -1, -1)].shape == (600, 64, 64)
            try:
                next(loader)
                code = 3
            except RuntimeError as e:
                code = 0 if ok and "forked" in str(e) else 4
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    next(loader)  # the parent's loader runs on
    loader.close()
    ro.close()
    close_all(streams)


@ours_only
def test_an_error_at_step_k_comes_after_every_step_before_it():
    # Sequential mode: the 'y' stream's first value says the step. Steps
    # before 5 are slow, step 5 fails at once: ordered delivery still hands
    # out steps 0..4 first, as the Rust loader does, whatever the timing.
    _, streams = make_streams(100)

    def slow_then_fail(batch):
        step = int(batch["y"][0]) // 4
        if step == 5:
            raise ValueError("step 5")
        if step < 5:
            time.sleep(0.05 * (5 - step))
        return step

    for _ in range(3):
        loader = DataLoader(streams, batch_size=4, mode=0, num_workers=4,
                            transform=slow_then_fail)
        got = [next(loader) for _ in range(5)]
        assert got == [0, 1, 2, 3, 4]
        with pytest.raises(ValueError, match="step 5"):
            next(loader)
        with pytest.raises(ValueError, match="step 5"):
            next(loader)  # sticky
        loader.close()
    close_all(streams)


def _in_thread(fn, limit=60.0):
    """Runs ``fn`` on a daemon thread; a hang fails the test instead of
    stalling the run."""
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 — re-raised below
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(limit)
    assert not t.is_alive(), "the loader hung"
    if "error" in box:
        raise box["error"]
    return box["value"]


@ours_only
@pytest.mark.parametrize("ordered", [True, False])
def test_ctrl_c_anywhere_in_next_loses_no_batch_and_never_hangs(ordered):
    # CPython raises a pending KeyboardInterrupt where it checks for signals:
    # on the consumer's thread, that is as any call returns. A profile hook
    # that raises on a call's return is exactly that: inject one at every
    # call return inside the pipeline's next() and hand-over in turn, catch
    # it as a notebook loop does, and carry on. The loader must deliver each
    # step once, in order, never hang, and lose a batch only when the
    # interrupt landed after its hand-over was complete (as if it had landed
    # in the caller just after next() returned).
    import sys
    from loaderx import dataloader as dl

    codes = {f.__code__ for f in (dl._Pipeline.next, getattr(dl._Pipeline, "_hand_over", None))
             if f is not None}
    _, streams = make_streams(5000)
    # Sequential, one record per batch: a batch's 'y' value is its step.
    st = {"slow": 0.0, "where": set()}

    def transform(b):
        time.sleep(st["slow"])
        return int(b["y"][0])

    # One worker: when it is slow, batches come one at a time and a call waits.
    loader = DataLoader(streams, batch_size=1, mode=0, num_workers=1, prefetch_size=2,
                        transform=transform, ordered=ordered)
    pipe = loader._pipeline

    def hook(frame, event, arg):
        if event == "c_return":
            site, name = frame, getattr(arg, "__name__", "?")
        elif event == "return":
            site, name = frame.f_back, frame.f_code.co_name
        else:
            return
        if site is None or site.f_code not in codes:
            return
        st["k"] += 1
        if st["k"] == st["target"]:
            # Complete = nothing is left for the next call to finish, and
            # this call began a hand-over or found one to finish.
            st["complete"] = pipe.taking is None and (
                pipe.delivered > st["before"] or st["pending"] is not None)
            st["where"].add(name)
            raise KeyboardInterrupt

    def drive():
        got, lost_ok, fired = [], 0, []
        # Calls that find their batch ready, then calls that wait for it.
        for slow, pause in ((0.0, 0.02), (0.005, 0.0)):
            st["slow"] = slow
            for _ in range(8):
                got.append(next(loader))  # drain what is ready
            target, hits = 1, 0
            while True:
                time.sleep(pause)
                st.update(k=0, target=target, before=pipe.delivered, pending=pipe.taking,
                          complete=False)
                sys.setprofile(hook)
                try:
                    got.append(next(loader))
                    hit = False
                except KeyboardInterrupt:
                    hit = True
                finally:
                    sys.setprofile(None)
                if not hit:
                    break  # the call ran out of points first: every one was hit
                hits += 1
                lost_ok += st["complete"]
                target += 1
            fired.append(hits)
        for _ in range(10):
            got.append(next(loader))  # and it runs on
        return got, lost_ok, fired

    got, lost_ok, fired = _in_thread(drive)
    assert fired[0] >= 4 and fired[1] >= 4, fired
    # Interrupts landed as the lock wait, the hand-over and its parts returned.
    assert {"wait", "pop", "_hand_over"} <= st["where"], st["where"]
    assert len(set(got)) == len(got)
    if ordered:
        assert got == sorted(got)
        missing = (got[-1] - got[0] + 1) - len(got)
        assert missing <= lost_ok, (missing, lost_ok)
        assert loader.step == got[-1] + 1
    loader.close()
    close_all(streams)


@ours_only
def test_ctrl_c_from_real_signals_never_hangs_the_loader(tmp_path):
    # The same with real SIGINTs, which land where CPython checks for
    # signals (also inside threading's own code), in a child process so that
    # a stray one cannot hit pytest.
    import subprocess
    import sys
    code = r'''
import os, signal, sys, threading, time
# Python keeps SIGINT ignored if it started ignored (a background job of a
# non-interactive shell, as CI may run us): install the default handler.
signal.signal(signal.SIGINT, signal.default_int_handler)
import numpy as np
from loaderx.dataloader import DataLoader
from loaderx.zrecord import DenseStore
with DenseStore("y", np.int64, ()) as s:
    s.append(np.arange(200000))
y = DenseStore("y", read_only=True)
loader = DataLoader({"y": y}, batch_size=1, mode=0, num_workers=2, prefetch_size=2,
                    transform=lambda b: int(b["y"][0]))
stop = False
go = threading.Event()
def kicker():
    go.wait()
    k = 0
    while not stop:
        os.kill(os.getpid(), signal.SIGINT)
        k += 1
        time.sleep(0.0002 * (k % 13))
got, hits, other = [], 0, 0
threading.Thread(target=kicker, daemon=True).start()
t0 = time.monotonic()
# At least 3 s, then on until enough batches and interrupts were seen (a
# loaded box delivers fewer per second), for at most a minute; and never
# past 150,000 batches: sequential indices wrap at the store's 200,000
# records, and a quiet box delivers over 30,000 batches a second.
while len(got) < 150000 and (time.monotonic() - t0 < 3.0 or (
        (len(got) <= 100 or hits <= 10) and time.monotonic() - t0 < 60)):
    try:
        go.set()
        got.append(next(loader))
    except KeyboardInterrupt:
        hits += 1
    except RuntimeError as e:
        # A SIGINT inside threading.Condition.wait's own unguarded window.
        other += 1
        if "un-acquired" not in str(e) and "release unlocked" not in str(e):
            raise
while True:
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        break
    except KeyboardInterrupt:
        pass
stop = True
time.sleep(0.05)
tail = [next(loader) for _ in range(20)]
bad = [(i, a, b) for i, (a, b) in enumerate(zip(got, got[1:])) if b <= a]
assert not bad, ("order", bad[:5], len(got), hits, other)
assert tail == sorted(tail) and tail[0] > got[-1], "tail"
print("ok", len(got), hits, other)
'''
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("ok"), r.stdout + r.stderr
    _, n, hits, _ = r.stdout.split()
    assert int(n) > 100 and int(hits) > 10, r.stdout


@ours_only
def test_seeking_the_loaders_sampler_mid_run_redirects_it_without_a_hang():
    # The reference lets a user move `loader.sampler` while the loader runs;
    # the batches already drawn come out first, then the new steps.
    _, streams = make_streams(1000)
    loader = DataLoader(streams, batch_size=1, mode=0, num_workers=2, prefetch_size=2,
                        transform=lambda b: int(b["y"][0]))

    def drive():
        first = [next(loader) for _ in range(3)]
        loader.sampler.seek(500)
        ahead = [next(loader) for _ in range(20)]
        loader.sampler.seek(10)  # backwards too
        back = [next(loader) for _ in range(20)]
        return first, ahead, back

    first, ahead, back = _in_thread(drive)
    assert first == [0, 1, 2]
    j = ahead.index(500)
    assert ahead[:j] == list(range(3, 3 + j))
    assert ahead[j:] == list(range(500, 500 + 20 - j))
    j = back.index(10)
    assert back[:j] == list(range(ahead[-1] + 1, ahead[-1] + 1 + j))
    assert back[j:] == list(range(10, 10 + 20 - j))
    assert loader.step == back[-1] + 1
    loader.close()
    close_all(streams)


class _SlowFirst:
    """A stream (anything with len() and __getitems__) whose step-0 gather
    is slow, so later batches reach the transform first."""

    def __len__(self):
        return 1000

    def __getitems__(self, idxs):
        if int(idxs[0]) == 0:
            time.sleep(0.3)
        return np.asarray(idxs)


@ours_only
def test_a_failing_transform_on_later_batches_still_raises_in_order():
    # Workers used to end on their first failure. When both failed on steps
    # 1 and 2 before step 0 was even gathered, nobody was left to transform
    # step 0, and ordered next() waited for it forever.
    def transform(batch):
        if int(batch["s"][0]) != 0:
            time.sleep(0.05)  # both workers take a failing batch first
            raise ValueError("bad sample")
        return int(batch["s"][0])

    loader = DataLoader({"s": _SlowFirst()}, batch_size=1, mode=0, num_workers=2,
                        transform=transform)

    def drive():
        first = next(loader)
        with pytest.raises(ValueError, match="bad sample"):
            next(loader)
        return first

    assert _in_thread(drive, limit=30) == 0
    loader.close()


@ours_only
def test_a_loader_whose_transform_holds_its_owner_is_freed_when_the_owner_is():
    # transform=self.collate: the owner holds the loader, the transform the
    # owner. The threads used to hold the pipeline (and so all of them), so a
    # dropped owner kept 4 threads and its stores' fds forever.
    _, streams = make_streams(50)
    before = threading.active_count()

    class Owner:
        def __init__(self):
            self.loader = DataLoader(streams, batch_size=4, num_workers=2,
                                     transform=self.collate)

        def collate(self, batch):
            return batch["y"]

    for _ in range(5):
        owner = Owner()
        next(owner.loader)
        del owner
    _threads_back_to(before, limit=20)
    close_all(streams)


@ours_only
def test_a_closed_loader_that_failed_frees_its_stores_without_the_cycle_collector():
    # The stored failure's traceback held frames whose locals were the
    # pipeline and the loader: after close() and del, the stores (fds, maps)
    # and the failed batch stayed until the cyclic collector ran, forever in
    # a training loop that disables it.
    import gc
    import weakref
    _, streams = make_streams(50)

    def bad(batch):
        raise ValueError("bad sample")

    gc.collect()
    gc.disable()
    try:
        loader = DataLoader(streams, batch_size=4, num_workers=2, transform=bad)
        ref = weakref.ref(loader._pipeline)
        try:
            next(loader)
        except ValueError:
            pass
        loader.close()
        del loader
        assert ref() is None
    finally:
        gc.enable()
    close_all(streams)


class _FileLikeStream:
    """A duck-typed stream that is not reentrant, like a wrapper over one
    file handle doing seek, then read: each record read back is its index
    only if no other call moved the shared position in between."""

    def __init__(self, n):
        self.n = n
        self.pos = 0

    def __len__(self):
        return self.n

    def __getitems__(self, idxs):
        out = []
        for i in idxs:
            self.pos = int(i)   # seek
            time.sleep(0)       # yield, as real I/O would
            out.append(self.pos)  # read at the current position
        return np.asarray(out, dtype=np.int64)


class _Column:
    """One column of a table behind a shared seek-then-read handle."""

    def __init__(self, handle, scale):
        self.handle, self.scale = handle, scale

    def __len__(self):
        return self.handle.n

    def __getitems__(self, idxs):
        return self.handle.__getitems__(idxs) * self.scale


@pytest.mark.parametrize("layout", ["one", "same object twice", "shared handle"])
def test_foreign_streams_are_gathered_one_batch_at_a_time(layout):
    """Streams other than this package's stores get their ``__getitems__``
    calls one batch at a time, all of them under one lock (as from the
    reference's single gather thread), so a stream named twice or columns
    over one handle never see two batches interleaved."""
    f = _FileLikeStream(1000)
    streams = {"one": {"x": f},
               "same object twice": {"x": f, "y": f},
               "shared handle": {"x": _Column(f, 1), "y": _Column(f, 2)}}[layout]
    loader = DataLoader(streams, batch_size=64, num_workers=2, mode=1, seed=3)
    try:
        sampler = Sampler(1000, 64, 1, seed=3)
        for _ in range(100):
            batch, want = next(loader), sampler.next().astype(np.int64)
            assert list(batch) == list(streams)
            np.testing.assert_array_equal(batch["x"], want)
            if "y" in batch:
                np.testing.assert_array_equal(batch["y"], want * (2 if layout == "shared handle" else 1))
    finally:
        loader.close()


@ours_only
def test_allocate_supplies_each_dense_batchs_memory():
    """``allocate`` gets (name, shape, dtype) per dense stream and batch; the
    batch carries exactly the object it returned, filled; ragged streams are
    gathered as usual."""
    x, streams = make_streams(60)
    calls, given = [], {}
    lock = threading.Lock()

    class Pinned:
        """Stands in for a pinned torch tensor: not an ndarray, viewed by
        numpy.asarray without a copy."""

        def __init__(self, shape, dtype):
            self.buf = np.full(shape, 99, dtype=dtype)

        def __array__(self, dtype=None, copy=None):
            return self.buf

    def allocate(name, shape, dtype):
        with lock:
            calls.append((name, shape, dtype, threading.current_thread().name))
        obj = Pinned(shape, dtype) if name == "x" else np.empty(shape, dtype)
        with lock:
            given[id(obj)] = obj
        return obj

    with DataLoader(streams, batch_size=8, num_workers=2, allocate=allocate) as loader:
        for _, batch in zip(range(12), loader):
            assert isinstance(batch["x"], Pinned) and id(batch["x"]) in given
            assert id(batch["y"]) in given
            np.testing.assert_array_equal(batch["x"].buf, x[batch["y"]])
            assert isinstance(batch["t"], list)
            for rec, i in zip(batch["t"], batch["y"]):
                assert (rec == i).all()
    close_all(streams)
    assert {c[0] for c in calls} == {"x", "y"}
    assert all(c[1][0] == 8 for c in calls)
    assert {(c[0], c[1][1:], c[2]) for c in calls} == {("x", (2, 3), np.dtype(np.float32)),
                                                       ("y", (), np.dtype(np.int64))}
    assert all(c[3].startswith("loaderx-gather") for c in calls)


@ours_only
@pytest.mark.parametrize("bad, err, msg", [
    (lambda name, shape, dtype: np.empty(shape, np.float64), ValueError, "'x'.*dtype '<f8'"),
    (lambda name, shape, dtype: np.empty((1, *shape), dtype), ValueError, "shape"),
    (lambda name, shape, dtype: np.empty(shape, dtype).tolist(), TypeError, "list.*copies"),
    (lambda name, shape, dtype: 1 / 0, ZeroDivisionError, "division"),
    (lambda name, shape, dtype: None, TypeError, r"allocate\('x'.*None"),
    (lambda name, shape, dtype: np.empty(shape[::-1], dtype).T, ValueError, "C-contiguous"),
    (lambda name, shape, dtype: next(iter(())), RuntimeError, "gathering the batch raised StopIteration"),
])
def test_a_bad_allocate_result_reraises_in_the_consumer(bad, err, msg):
    x, streams = make_streams(20)
    del streams["y"], streams["t"]
    with DataLoader(streams, batch_size=4, num_workers=1, allocate=bad) as loader:
        with pytest.raises(err, match=msg):
            next(loader)
    close_all(streams)


@ours_only
def test_allocate_must_be_callable():
    x, streams = make_streams(10)
    with pytest.raises(TypeError, match="allocate must be callable"):
        DataLoader(streams, allocate=np.zeros((2, 2)))
    close_all(streams)


@ours_only
def test_allocate_fills_torch_tensors_pinned_where_cuda_is():
    """The documented GPU pattern with real torch (skipped without it): the
    batch holds the tensors allocate made, filled in place."""
    torch = pytest.importorskip("torch")
    pin = torch.cuda.is_available()
    types = {np.dtype(np.float32): torch.float32, np.dtype(np.int64): torch.int64}
    made = []

    def pinned(name, shape, dtype):
        t = torch.empty(shape, dtype=types[dtype], pin_memory=pin)
        made.append(t.data_ptr())
        return t

    x, streams = make_streams(40)
    del streams["t"]
    with DataLoader(streams, batch_size=8, allocate=pinned) as loader:
        for _ in range(5):
            b = next(loader)
            assert isinstance(b["x"], torch.Tensor) and b["x"].data_ptr() in made
            assert b["x"].is_pinned() == pin
            np.testing.assert_array_equal(b["x"].numpy(), x[b["y"].numpy()])
    close_all(streams)


@ours_only
def test_allocate_refuses_a_read_only_array_and_one_buffer_handed_out_twice():
    x, streams = make_streams(40)
    del streams["y"], streams["t"]

    def read_only(name, shape, dtype):
        a = np.empty(shape, dtype)
        a.flags.writeable = False
        return a

    with DataLoader(streams, batch_size=4, num_workers=1, allocate=read_only) as loader:
        with pytest.raises(ValueError, match="read-only"):
            next(loader)
    # One fixed buffer per stream: the second batch in the pipeline would
    # overwrite the first. Refused, naming both requests.
    fixed = np.empty((4, 2, 3), np.float32)
    with DataLoader(streams, batch_size=4, num_workers=1,
                    allocate=lambda name, shape, dtype: fixed) as loader:
        with pytest.raises(ValueError, match=r"allocate\('x'.*a batch still in the pipeline owns"):
            for _ in range(200):  # the pipeline runs ahead: two batches meet
                next(loader)
    # Slices of one big buffer, each batch its own: fine, whatever the order.
    big = np.empty((1000, 2, 3), np.float32)
    count = iter(range(10**9))
    lock = threading.Lock()

    def slices(name, shape, dtype):
        with lock:
            k = next(count) % 250
        return big[4 * k:4 * k + 4]

    with DataLoader(streams, batch_size=4, num_workers=2, allocate=slices) as loader:
        for _, b in zip(range(30), loader):
            assert b["x"].base is big
            np.testing.assert_array_equal(b["x"], x[np.asarray(b["x"][:, 0, 0] // 6, dtype=np.int64)])
    close_all(streams)


@ours_only
def test_packed_ragged_streams_come_as_one_array_with_offsets():
    x, streams = make_streams(60)
    with DataLoader(streams, batch_size=8, num_workers=2, packed=["t"]) as loader:
        for _, batch in zip(range(10), loader):
            values, offsets, shapes = batch["t"]
            assert values.dtype == np.int32 and list(np.diff(offsets)) == [s[0] for s in shapes]
            for k, i in enumerate(batch["y"]):
                rec = values[offsets[k]:offsets[k + 1]]
                assert shapes[k] == (i % 5 + 1,) and (rec == i).all()
            assert isinstance(batch["x"], np.ndarray)  # dense streams as before
    for bad, msg in ((["x"], "'x', which is a DenseStore"), (["nope"], "'nope', which is no such")):
        with pytest.raises(ValueError, match=msg):
            DataLoader(streams, packed=bad)
    close_all(streams)


@ours_only
def test_allocate_with_fresh_arrays_and_a_transform_that_drops_them():
    """np.empty per batch and a transform that keeps only a reduction: the
    freed buffers come back from malloc at the same addresses, which must
    not read as memory a batch in the pipeline still owns."""
    x, streams = make_streams(64)
    del streams["t"]
    with DataLoader(streams, batch_size=32, num_workers=2,
                    allocate=lambda name, shape, dtype: np.empty(shape, dtype),
                    transform=lambda b: (b["x"].sum(axis=(1, 2)), b["y"].copy())) as loader:
        for _ in range(300):
            sums, y = next(loader)
            np.testing.assert_array_equal(sums, x[y].sum(axis=(1, 2)))
    close_all(streams)


class _Unprintable:
    """A stream name whose repr raises."""

    def __repr__(self):
        raise ValueError("no repr")

    __str__ = __repr__


def test_a_failing_gather_reraises_even_when_the_stream_name_cannot_be_printed():
    # The failure path formats the stream's name into a note; when that
    # raised, the gather thread died with the failure unrecorded and next()
    # waited forever for a batch nobody would make.
    class Broken:
        def __len__(self):
            return 10

        def __getitems__(self, idxs):
            raise OSError("disk gone")

    loader = DataLoader({_Unprintable(): Broken()}, batch_size=2, num_workers=1)
    try:
        with pytest.raises(OSError, match="disk gone"):
            _in_thread(lambda: next(loader))
    finally:
        loader.close()


@ours_only
def test_a_transform_raising_an_unprintable_stopiteration_still_reraises():
    # StopIteration is wrapped in a RuntimeError whose message holds its
    # repr; a repr that raised killed the worker and next() hung.
    class Odd(StopIteration):
        def __repr__(self):
            raise ValueError("no repr")

        __str__ = __repr__

    def transform(batch):
        raise Odd()

    _, streams = make_streams(20)
    loader = DataLoader(streams, batch_size=4, num_workers=1, transform=transform)
    try:
        with pytest.raises(RuntimeError, match="its repr raised") as info:
            _in_thread(lambda: next(loader))
        assert isinstance(info.value.__cause__, Odd)
    finally:
        loader.close()
        close_all(streams)


@ours_only
def test_two_transforms_closing_the_loader_at_once_do_not_wait_for_each_other():
    # close() from a transform waited for every other pipeline thread; two
    # transforms closing at once each waited for the other for the whole
    # timeout, and a consumer's close() behind them too.
    _, streams = make_streams(40)
    ready = threading.Event()
    both = threading.Barrier(2)
    box = {}

    def transform(batch):
        ready.wait(60)
        try:
            both.wait(60)
        except threading.BrokenBarrierError:
            return batch
        box["loader"].close(timeout=3600)
        return batch

    start = threading.active_count()
    loader = DataLoader(streams, batch_size=4, num_workers=2, transform=transform)
    box["loader"] = loader
    ready.set()

    def consume():
        with pytest.raises(RuntimeError, match="closed"):
            next(loader)
        loader.close(timeout=3600)

    try:
        _in_thread(consume)
        assert not any(t.is_alive() for t in loader._pipeline.threads)
    finally:
        both.abort()
        close_all(streams)
    _threads_back_to(start, 30)


@ours_only
def test_close_by_a_thread_holding_the_pipelines_lock_does_not_wait_on_it():
    # A signal handler, or a finalizer the cyclic collector runs, can call
    # close() while its thread is inside next() (or a pipeline thread is
    # inside its bookkeeping) and holds the pipeline's lock; close() then
    # waited for threads that needed that very lock, for the whole timeout.
    _, streams = make_streams(40)
    start = threading.active_count()
    loader = DataLoader(streams, batch_size=4, num_workers=2)
    next(loader)

    def close_holding_the_lock():
        with loader._pipeline.lock:
            loader.close(timeout=3600)

    try:
        _in_thread(close_holding_the_lock)
        with pytest.raises(RuntimeError, match="closed"):
            next(loader)
        _in_thread(loader.close)  # now waits for the threads, which end
        assert not any(t.is_alive() for t in loader._pipeline.threads)
    finally:
        close_all(streams)
    _threads_back_to(start, 30)


@ours_only
@pytest.mark.parametrize("limit", [None, math.inf, 10**400, np.float64(1e300)],
                         ids=["None", "inf", "huge-int", "1e300"])
def test_close_with_no_limit_or_one_past_what_join_takes_waits_for_the_threads(limit):
    # close(None) raised a TypeError (float + None), and close(math.inf) an
    # OverflowError from Thread.join, after either had already stopped the
    # pipeline, leaving the threads unwaited for.
    _, streams = make_streams(40)
    loader = DataLoader(streams, batch_size=4, num_workers=2)
    next(loader)
    try:
        _in_thread(lambda: loader.close(timeout=limit))
        assert not any(t.is_alive() for t in loader._pipeline.threads)
    finally:
        loader.close()
        close_all(streams)


@ours_only
@pytest.mark.parametrize("limit, error", [(math.nan, ValueError), ("5", TypeError), (True, TypeError)])
def test_a_close_limit_that_is_no_number_of_seconds_is_refused_before_anything_stops(limit, error):
    _, streams = make_streams(40)
    loader = DataLoader(streams, batch_size=4, num_workers=2)
    try:
        with pytest.raises(error, match="timeout"):
            loader.close(timeout=limit)
        assert next(loader)["x"].shape[0] == 4  # still running
    finally:
        loader.close()
        close_all(streams)


_EXIT_SCRIPT = r'''
import os, sys, time
import numpy as np
import loaderx.dataloader as dl_mod
from loaderx.dataloader import DataLoader

mode = sys.argv[1]
dl_mod._EXIT_TIMEOUT = float(sys.argv[2])

class Slow:
    """A foreign stream whose later gathers take a while."""
    calls = 0
    def __len__(self):
        return 64
    def __getitems__(self, idxs):
        Slow.calls += 1
        if Slow.calls > 1:
            time.sleep(1.0 if mode == "gather" else 0.0)
            # Reached only if the thread could still run after the sleep.
            with open(f"gathered.{Slow.calls}", "w"):
                pass
        return np.asarray(idxs, dtype=np.int64)

def stuck(batch):
    if mode == "stuck":
        time.sleep(3600)
    return batch

kw = {"transform": stuck} if mode == "stuck" else {}
loader = DataLoader({"x": Slow()}, batch_size=4, num_workers=1, prefetch_size=1, **kw)
if mode == "gather":
    next(loader)
else:
    time.sleep(0.5)  # the transform thread is now inside stuck()
print("leaving", flush=True)
'''


@ours_only
def test_an_exit_with_a_gather_in_flight_lets_it_finish_and_ends(tmp_path):
    """At exit the pipeline's threads are stopped while they can still run:
    the gather in flight completes (its stream writes a file after a 1 s
    sleep), then the process ends. Before, finalization froze the thread at
    the end of its sleep (so no file), and a loader's __del__ in the
    teardown could then wait for good on the lock such a frozen thread
    held (about one exit in twelve hung with a native gather in flight)."""
    import subprocess
    import sys

    (tmp_path / "exit.py").write_text(_EXIT_SCRIPT)
    r = subprocess.run([sys.executable, "exit.py", "gather", "10"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "leaving\n"
    assert r.stderr == ""
    # Gathers 2 (and 3, from the second gather thread, once 2 let go of the
    # foreign streams' lock) were in flight when the script ended.
    assert "gathered.2" in {p.name for p in tmp_path.glob("gathered.*")}


@ours_only
def test_an_exit_waits_for_a_stuck_transform_no_longer_than_its_bound(tmp_path):
    import subprocess
    import sys

    (tmp_path / "exit.py").write_text(_EXIT_SCRIPT)
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "exit.py", "stuck", "1.0"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    assert r.stdout == "leaving\n" and r.stderr == ""
    assert took < 30, took


@ours_only
def test_exits_with_native_gathers_in_flight_never_hang(tmp_path):
    """The native gather of big zstd records is in flight at exit, many
    times over (one exit in twelve hung before)."""
    import subprocess
    import sys

    with DenseStore("big", np.uint8, (256 << 10,), codec="zstd") as s:
        s.append(np.random.default_rng(0).integers(0, 20, (512, 256 << 10), dtype=np.uint8))
    code = ("from loaderx.zrecord import DenseStore\n"
            "from loaderx.dataloader import DataLoader\n"
            "dl = DataLoader({'x': DenseStore('big', read_only=True)}, batch_size=256)\n"
            "next(dl)\n")
    for _ in range(12):
        r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stderr == "", r.stderr


_FORK_SCRIPT = r'''
import os, sys, threading, time
import numpy as np
import loaderx.dataloader as dl_mod
from loaderx.dataloader import DataLoader

class Stream:
    def __len__(self):
        return 8
    def __getitems__(self, idxs):
        return np.asarray(idxs, dtype=np.int64)

# Another thread holds the registry's lock at the fork, as one building a
# DataLoader (or an exit's close) does for a moment.
held, release = threading.Event(), threading.Event()
def hold():
    with dl_mod._LIVE_LOCK:
        held.set()
        release.wait()
t = threading.Thread(target=hold)
t.start()
held.wait()
pid = os.fork()
if pid == 0:
    if sys.argv[1] == "loader":
        loader = DataLoader({"x": Stream()}, batch_size=2, num_workers=1)
        next(loader)
    sys.exit(0)  # a normal exit: the atexit hook runs
release.set()
t.join()
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        print("child", os.waitstatus_to_exitcode(status))
        break
    time.sleep(0.05)
else:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    print("child hung")
'''


@ours_only
@pytest.mark.parametrize("child", ["exit", "loader"])
def test_a_child_forked_while_another_thread_held_the_registry_lock_runs_and_exits(
        tmp_path, child):
    """Regression: the lock guarding the registry of live pipelines (closed
    at exit) was inherited locked by a child forked while another thread
    held it, and nothing released it there: the child's exit hook, or its
    first DataLoader, waited for good."""
    import subprocess
    import sys

    (tmp_path / "fork.py").write_text(_FORK_SCRIPT)
    r = subprocess.run([sys.executable, "fork.py", child], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "child 0\n", (r.stdout, r.stderr)
