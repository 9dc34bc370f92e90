"""Sampler public behaviour: modes, batch shapes, determinism, seek."""

import numpy as np
import pytest

from loaderx.zsampler import Sampler

from conftest import ours_only


def test_modes_exist():
    assert (Sampler.Mode.SEQUENTIAL, Sampler.Mode.IID, Sampler.Mode.CYCLIC) == (0, 1, 2)


def test_sequential_wraps():
    s = Sampler(10, 4, Sampler.Mode.SEQUENTIAL)
    got = [s.next() for _ in range(3)]
    assert [g.tolist() for g in got] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1]]
    assert all(g.dtype == np.uint64 for g in got)
    assert Sampler(3, 4, 0).next().tolist() == [0, 1, 2, 0]


def test_iid_deterministic_and_in_range():
    a = Sampler(1000, 256, Sampler.Mode.IID, seed=7)
    b = Sampler(1000, 256, Sampler.Mode.IID, seed=7)
    c = Sampler(1000, 256, Sampler.Mode.IID, seed=8)
    xa, xb, xc = a.next(), b.next(), c.next()
    assert xa.shape == (256,) and xa.max() < 1000
    np.testing.assert_array_equal(xa, xb)
    assert not np.array_equal(xa, xc)
    assert Sampler(3, 4, 1).next().shape == (4,)


def test_cyclic_covers_each_cycle_once():
    s = Sampler(100, 10, Sampler.Mode.CYCLIC, seed=3)
    cycle = np.concatenate([s.next() for _ in range(10)])
    assert sorted(cycle.tolist()) == list(range(100))
    nxt = np.concatenate([s.next() for _ in range(10)])
    assert sorted(nxt.tolist()) == list(range(100))
    assert not np.array_equal(cycle, nxt)
    # remainder dropped: every batch is exactly batch_size
    s = Sampler(103, 10, 2)
    assert all(len(s.next()) == 10 for _ in range(25))
    # fewer records than one batch: one short batch of all of them
    assert sorted(Sampler(3, 4, 2).next().tolist()) == [0, 1, 2]


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_seek_resumes_exactly(mode):
    s = Sampler(1000, 32, mode, seed=11)
    stream = [s.next() for _ in range(50)]
    r = Sampler(1000, 32, mode, seed=11)
    r.seek(37)
    for k in range(37, 50):
        np.testing.assert_array_equal(r.next(), stream[k])
    r.seek(0)
    np.testing.assert_array_equal(r.next(), stream[0])


def test_iterator_protocol_and_copies():
    s = Sampler(50, 5, 1)
    it = iter(s)
    a = next(it)
    a[:] = 999
    b = next(it)
    assert b.max() < 50


def test_argument_types():
    with pytest.raises(OverflowError):
        Sampler(10, 4, 1, seed=-1)
    with pytest.raises(TypeError):
        Sampler(10.5, 4, 1)


@ours_only
def test_invalid_arguments_raise_value_error():
    for args in [(0, 4, 2), (10, 0, 2), (10, 4, 7)]:
        with pytest.raises(ValueError):
            Sampler(*args)


@ours_only
def test_sharding_partitions_the_global_stream():
    g = Sampler(1000, 12, 2, seed=5)
    shards = [Sampler(1000, 12, 2, seed=5, rank=r, world=3) for r in range(3)]
    for _ in range(4):
        glob = g.next()
        parts = [s.next() for s in shards]
        assert [len(p) for p in parts] == [4, 4, 4]
        np.testing.assert_array_equal(np.concatenate(parts), glob)
    with pytest.raises(ValueError):
        Sampler(1000, 12, 2, rank=3, world=3)
    s = Sampler(1000, 12, 2, seed=5)
    assert s.step == 0
    s.next()
    assert s.step == 1
    np.testing.assert_array_equal(s.batch_at(0), Sampler(1000, 12, 2, seed=5).next())
    assert s.step == 1


def test_subclasses_with_their_own_init():
    """A Python subclass may take its own arguments and call
    ``super().__init__`` (as with the reference's plain-Python class)."""

    class OverDataset(Sampler):
        def __init__(self, dataset, batch_size):
            super().__init__(len(dataset), batch_size, Sampler.Mode.SEQUENTIAL)
            self.dataset = dataset

    s = OverDataset(list(range(7)), 3)
    assert s.next().tolist() == [0, 1, 2]
    assert s.dataset == list(range(7))

    class Passthrough(Sampler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)

    p = Passthrough(10, 4, Sampler.Mode.CYCLIC, seed=5)
    np.testing.assert_array_equal(p.next(), Sampler(10, 4, 2, seed=5).next())


@ours_only
def test_a_subclass_that_skips_super_init_gets_a_clear_error():
    class Forgot(Sampler):
        def __init__(self, n):
            self.n = n

    with pytest.raises(RuntimeError, match=r"super\(\)\.__init__"):
        Forgot(5).next()


def test_a_batch_too_large_for_memory_is_a_memory_error():
    """Under an address-space limit, a 16 GiB batch raises MemoryError (an
    ``Exception``), not a panic that ``except Exception`` cannot catch."""
    import subprocess
    import sys

    code = (
        "import resource\n"
        "import numpy as np\n"
        "from loaderx.zsampler import Sampler\n"
        "resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))\n"
        "try:\n"
        "    Sampler(10, 2**31, 1).next()\n"
        "except MemoryError:\n"
        "    print('MemoryError')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "MemoryError", r.stderr[-2000:]
