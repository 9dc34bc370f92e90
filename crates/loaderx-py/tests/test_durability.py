"""When appends become durable (an extension: ``durability=``).

The default, ``"at_sync"``, is loaderx 1.7.2's model: an append returns once
its bytes are in the page cache, and ``sync()`` / ``close()`` make them
durable. While appends run ahead of the disk, ``meta.zr`` keeps the last
durable header and a ``durable.zr`` marker holds theirs; after a delete the
marker records the last durable state instead, so that an open after a power
cut can roll back to it. A killed process loses nothing (its page cache
survives it, and the next open here adopts the marker's header).
"""

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from loaderx.zrecord import DenseStore, RaggedStore, ZrecordError

from conftest import ours_only, run_ref

pytestmark = ours_only

MARKER = "durable.zr"


def marker(path):
    """Whether durable.zr holds a marker or a pending appends record: a
    writer keeps the file between syncs with its first sector zeroed, and
    removes it at close."""
    try:
        with open(os.path.join(path, MARKER), "rb") as f:
            return any(f.read(8))
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_the_default_defers_until_sync_or_close(kind):
    def store():
        if kind == "dense":
            return DenseStore("s", np.int32, (4,), codec="zstd")
        return RaggedStore("s", np.int32, codec="zstd")

    def rows(n, at):
        a = np.arange(at * 4, (at + n) * 4, dtype=np.int32).reshape(n, 4)
        return a if kind == "dense" else list(a)

    s = store()
    assert s.durability == "at_sync"
    assert not marker("s")
    s.append(rows(3, 0))
    assert marker("s"), "the first deferred append writes the marker"
    s.sync()
    assert not marker("s"), "sync makes the appends durable"
    s.append(rows(2, 3))
    assert marker("s")
    s.close()
    assert not marker("s"), "close syncs"
    with store() as s:
        s.append(rows(1, 5))
        assert marker("s")
    assert not marker("s"), "leaving the with block syncs"
    with DenseStore("s") if kind == "dense" else RaggedStore("s") as s:
        got = np.stack(list(s[:]))
    assert got.tolist() == np.stack(list(rows(6, 0))).tolist()


def test_deletes_defer_and_compact_makes_everything_durable():
    with DenseStore("s", np.uint8, (8,), codec="raw") as s:
        s.append(np.ones((5, 8), np.uint8))
        s.sync()
        s.delete([0])
        assert marker("s"), "a deferred delete is logged in the marker"
        s.append(np.ones((2, 8), np.uint8))
        s.compact()
        assert not marker("s")
        assert len(s) == 6
    with DenseStore("e", np.uint8, (8,), durability="each_append") as s:
        s.append(np.ones((5, 8), np.uint8))
        s.delete([0])
        assert not marker("e"), "an each-append delete is durable on return"


DELETER = textwrap.dedent(r'''
    import os, signal, sys
    import numpy as np
    from loaderx.zrecord import DenseStore, RaggedStore
    path, kind = sys.argv[1], sys.argv[2]
    if kind == "dense":
        s = DenseStore(path, np.int64, (4,), codec="zstd")
        s.append(np.arange(400, dtype=np.int64).reshape(100, 4))
    else:
        s = RaggedStore(path, np.int64, codec="zstd")
        s.append([np.arange(i % 7 + 1, dtype=np.int64) + 10 * i for i in range(100)])
    s.sync()
    for i in (3, 50, 7, 0, 42):
        s.delete(i)  # one index per call: logged, not yet written in place
    print("deleted", len(s), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # no close, no destructor
''')


@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_a_killed_deleter_loses_no_returned_delete(kind):
    proc = subprocess.run([sys.executable, "-c", DELETER, "s", kind],
                          capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert "deleted 95" in proc.stdout
    assert marker("s")
    if kind == "dense":
        model = [np.arange(4 * i, 4 * i + 4) for i in range(100)]
    else:
        model = [np.arange(i % 7 + 1) + 10 * i for i in range(100)]
    for i in (3, 50, 7, 0, 42):
        model[i] = model[-1]
        model.pop()
    # A read-only open finishes the deletes in memory; a read-write one
    # writes them and makes them durable.
    for ro in (True, False):
        s = (DenseStore if kind == "dense" else RaggedStore)("s", read_only=ro)
        assert len(s) == 95
        got = list(s[:])
        assert all(np.array_equal(g, w) for g, w in zip(got, model))
        assert s.verify()["ok"]
        s.close()
    assert not marker("s")


ONE_DELETE = textwrap.dedent(r'''
    import os, signal, sys
    import numpy as np
    from loaderx.zrecord import DenseStore, RaggedStore
    path, kind = sys.argv[1], sys.argv[2]
    if kind == "dense":
        s = DenseStore(path, np.int64, (2,), codec="raw")
        s.append(np.arange(20, dtype=np.int64).reshape(10, 2) // 2)
    else:
        s = RaggedStore(path, np.int64, codec="raw")
        s.append([np.full(i % 3 + 1, i, np.int64) for i in range(10)])
    s.sync()
    s.delete(0)  # pending: record 9 is to move to slot 0
    os.kill(os.getpid(), signal.SIGKILL)
''')


@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_a_foreign_delete_of_as_many_records_stands_over_pending_deletes(kind, ref_python):
    """Killed with delete(0) pending, then loaderx 1.7.2 (which ignores
    durable.zr) deletes record 5: its meta.zr is the header our delete
    would write (one record fewer, nothing appended), so the header check
    alone let our open finish delete(0) over it, putting record 9 at 0 and 5
    and losing records 0 and 5 (found by the differential test, seed 16001)."""
    proc = subprocess.run([sys.executable, "-c", ONE_DELETE, "s", kind],
                          capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert marker("s")
    out = run_ref(ref_python, textwrap.dedent('''
        import sys
        from loaderx.zrecord import DenseStore, RaggedStore
        s = (DenseStore if sys.argv[2] == "dense" else RaggedStore)(sys.argv[1])
        s.delete(5)
        print(*[int(x.ravel()[0]) for x in s[:]])
        s.close()
    '''), os.path.abspath("s"), kind)
    want = [0, 1, 2, 3, 4, 9, 6, 7, 8]
    assert [int(x) for x in out.split()] == want
    for ro in (True, False):
        s = (DenseStore if kind == "dense" else RaggedStore)("s", read_only=ro)
        assert [int(x.ravel()[0]) for x in s[:]] == want
        assert s.verify()["ok"]
        s.close()


@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_each_append_is_durable_on_return(kind):
    if kind == "dense":
        s = DenseStore("s", np.uint8, (8,), durability="each_append")
        s.append(np.zeros((2, 8), np.uint8))
    else:
        s = RaggedStore("s", np.uint8, durability="each_append")
        s.append([b"abc", b"de"])
    assert s.durability == "each_append"
    assert not marker("s"), "each-append writes no marker"
    s.close()
    # The durability belongs to a handle: a reopen picks its own.
    again = DenseStore("s") if kind == "dense" else RaggedStore("s")
    assert again.durability == "at_sync"
    again.close()


def test_an_unknown_durability_is_a_value_error():
    with pytest.raises(ValueError, match="durability"):
        DenseStore("s", np.uint8, (8,), durability="sometimes")
    DenseStore("s", np.uint8, (8,)).close()
    with pytest.raises(ValueError, match="durability"):
        DenseStore("s", durability="eventually")
    with pytest.raises(ValueError, match="durability"):
        RaggedStore("r", np.uint8, durability="")


WRITER = textwrap.dedent(r'''
    import os, signal, sys
    import numpy as np
    from loaderx.zrecord import DenseStore
    s = DenseStore(sys.argv[1], np.int64, (16,), codec=sys.argv[2])
    for i in range(200):
        s.append(np.full((1, 16), i, np.int64))
        if i == 119:
            s.sync()
    print("appended", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # no close, no destructor
''')


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_a_killed_writer_loses_no_returned_append(codec, ref_python):
    proc = subprocess.run([sys.executable, "-c", WRITER, "s", codec],
                          capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert "appended" in proc.stdout
    assert marker("s"), "80 appends after the last sync left the marker"
    # The reference ignores the marker, which holds the header of the
    # appends since the sync: it reads the store as of that sync.
    read_ref = textwrap.dedent('''
        import sys, numpy as np
        from loaderx.zrecord import DenseStore
        with DenseStore(sys.argv[1]) as s:
            print(len(s), int(s[len(s) - 1][0]))
    ''')
    assert run_ref(ref_python, read_ref, os.path.abspath("s")).split() == ["120", "119"]
    # Same boot: the page cache holds every write, so nothing rolls back.
    with DenseStore("s", read_only=True) as ro:
        assert len(ro) == 200
    assert marker("s"), "a read-only open leaves the marker"
    with DenseStore("s") as s:
        assert not marker("s"), "a read-write open settles it"
        got = s[:]
    assert got[:, 0].tolist() == list(range(200))
    assert (got == got[:, :1]).all()
    # Settled, `meta.zr` names them all, for the reference too.
    assert run_ref(ref_python, read_ref, os.path.abspath("s")).split() == ["200", "199"]


def _fork(fn):
    """Run ``fn`` in a forked child, which exits with its return value (4 if
    it raised); return the child's pid."""
    pid = os.fork()
    if pid == 0:
        code = 4
        try:
            code = fn()
        finally:
            os._exit(code)
    return pid


def _exit_code(pid):
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_cannot_write_nor_close_the_parents_appends_durable():
    s = DenseStore("s", np.uint8, (8,), codec="raw")
    s.append(np.ones((3, 8), np.uint8))
    assert marker("s")

    def child():
        try:
            s.append(np.ones((1, 8), np.uint8))
            return 1
        except ZrecordError as e:
            if "forked" not in str(e):
                return 2
        # Neither can it make the parent's deferred appends durable: its
        # close says so (and releases its copy), leaving the marker.
        try:
            s.close()
            return 3
        except ZrecordError as e:
            return 0 if "deferred appends durable" in str(e) else 5

    assert _exit_code(_fork(child)) == 0
    # The parent's appends are still ahead of the disk: the marker must stay.
    assert marker("s")
    s.append(np.ones((2, 8), np.uint8))
    assert len(s) == 5
    s.close()
    assert not marker("s")
    with DenseStore("s") as s:
        assert len(s) == 5


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_whose_parent_closed_cannot_append_without_a_marker():
    s = DenseStore("s", np.uint8, (8,), codec="raw")
    s.append(np.ones((3, 8), np.uint8))
    r, w = os.pipe()

    def child():
        os.read(r, 1)  # wait for the parent's close
        try:
            s.append(np.ones((1, 8), np.uint8))
            return 1
        except ZrecordError:
            return 0

    pid = _fork(child)
    s.close()
    assert not marker("s")
    os.write(w, b"x")
    assert _exit_code(pid) == 0
    assert not marker("s")
    with DenseStore("s") as s:
        assert len(s) == 3


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize("codec", ["raw", "zstd"])
@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_compaction_refuses_while_a_forked_child_may_still_read(codec, kind):
    # A child's inherited handle keeps the record table and memory maps of
    # fork time. A compaction in the parent used to move and truncate the
    # bytes under them: the child read other records, then died of SIGBUS.
    from loaderx.zrecord import RaggedStore, StoreBusy
    n = 1000

    def rec(i):
        return np.full(8, i, np.int64) if kind == "dense" else np.full(1 + i % 5, i, np.int64)

    if kind == "dense":
        s = DenseStore("s", np.int64, (8,), codec=codec)
        s.append(np.stack([rec(i) for i in range(n)]))
    else:
        s = RaggedStore("s", np.int64, codec=codec)
        s.append([rec(i) for i in range(n)])
    s.sync()
    r, w = os.pipe()

    def child():
        os.read(r, 1)  # wait for the parent's delete and compaction attempt
        ok = len(s) == n and all(
            np.array_equal(np.asarray(s[i]), rec(i)) for i in (0, 1, 2, 400, 900, n - 1))
        return 0 if ok else 1

    pid = _fork(child)
    s.delete(list(range(0, n, 2)))  # deletes leave bytes in place: safe
    with pytest.raises(StoreBusy, match="forked"):
        s.compact()
    os.write(w, b"x")
    assert _exit_code(pid) == 0
    assert len(s) == n // 2
    s.close()
    # The child is gone: the store opens again, and compacts.
    s = (DenseStore if kind == "dense" else RaggedStore)("s")
    s.compact()
    assert sorted(int(np.asarray(s[i])[0]) for i in range(len(s))) == list(range(1, n, 2))
    s.close()
