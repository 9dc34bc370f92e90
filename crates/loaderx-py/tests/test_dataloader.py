"""DataLoader public behaviour: batch dicts over dense + ragged streams,
alignment, transform on worker threads, error propagation with traceback,
close, len(), and the sharding / resume extensions."""

import threading
import time
import traceback

import numpy as np
import pytest

from loaderx.dataloader import DataLoader
from loaderx.zrecord import DenseStore, RaggedStore

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
    import gc
    _, streams = make_streams(20)
    before = threading.active_count()
    loader = DataLoader(streams, batch_size=4, num_workers=2)
    next(loader)
    del loader
    gc.collect()
    deadline = time.monotonic() + 10
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() == before
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
