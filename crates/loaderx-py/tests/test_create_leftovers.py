"""Re-running a script whose store create was killed part-way.

Regression: the files a killed create leaves (``meta.zr`` with no
``store.zr``, or a ``meta.zr.creating.*`` file) made the same
``DenseStore(path, dtype=..., item_shape=...)`` fail on the next run
(InvalidStore "creation did not finish", or ForeignFiles) until someone
removed them by hand. Now a call that would create a store clears them and
creates it; an open (no create arguments) still reports them, and files
beside them that a create does not leave are refused as before.
"""

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from loaderx.zrecord import DenseStore, RaggedStore, ZrecordError

from conftest import ours_only

pytestmark = ours_only

# Creates a store with writes past 33 bytes killing the process (SIGXFSZ,
# which Python ignores by default): meta.zr (32 bytes) and the empty
# 0.chunk are written, then the process dies writing store.zr.tmp (or, with
# a dictionary, dict.zr).
KILLED_CREATE = textwrap.dedent("""
    import resource, signal, sys
    import numpy as np
    from loaderx.zrecord import DenseStore, RaggedStore
    path, kind = sys.argv[1], sys.argv[2]
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (33, hard))
    if kind == "dense":
        DenseStore(path, dtype=np.float32, item_shape=(3,), codec="zstd")
    elif kind == "dict":
        DenseStore(path, dtype=np.float32, item_shape=(3,), codec="zstd_dict",
                   dict_bytes=bytes(range(256)) * 64)
    else:
        RaggedStore(path, dtype=np.int16, codec="raw")
    print("not killed")
""")


def killed_create(path, kind):
    r = subprocess.run([sys.executable, "-c", KILLED_CREATE, str(path), kind],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == -signal.SIGXFSZ, (r.returncode, r.stdout, r.stderr)
    names = sorted(os.listdir(path))
    assert "meta.zr" in names and "store.zr" not in names, names
    return names


def _store(kind, path, create):
    if kind == "ragged":
        return RaggedStore(str(path), *((np.int16,) if create else ()))
    if create:
        return DenseStore(str(path), np.float32, (3,), codec="zstd")
    return DenseStore(str(path))


@pytest.mark.parametrize("kind", ["dense", "dict", "ragged"])
def test_a_rerun_after_a_killed_create_creates_the_store(tmp_path, kind):
    path = tmp_path / "s"
    left = killed_create(path, kind)
    store_kind = "ragged" if kind == "ragged" else "dense"
    # An open (no create arguments) still says the create did not finish.
    with pytest.raises(ZrecordError) as caught:
        _store(store_kind, path, create=False)
    assert caught.value.code == -8
    assert "did not finish" in str(caught.value), str(caught.value)
    assert sorted(os.listdir(path)) == left
    # The script run again: it creates the store.
    s = _store(store_kind, path, create=True)
    if store_kind == "dense":
        s.append(np.arange(6, dtype=np.float32).reshape(2, 3))
    else:
        s.append([np.arange(4, dtype=np.int16), np.arange(2, dtype=np.int16)])
    s.close()
    s = _store(store_kind, path, create=False)
    assert len(s) == 2
    if store_kind == "dense":
        np.testing.assert_array_equal(s[1], [3, 4, 5])
    else:
        np.testing.assert_array_equal(s[0], np.arange(4))
    s.close()
    assert not [n for n in os.listdir(path) if "creating" in n or n.endswith(".tmp")]


@pytest.mark.parametrize("left", ["creating", "empty meta"])
def test_written_leftovers_are_taken_by_a_create(tmp_path, left):
    path = tmp_path / "s"
    path.mkdir()
    if left == "creating":
        (path / "meta.zr.creating.999999.0").write_bytes(b"")
    else:
        (path / "meta.zr").write_bytes(b"")
        (path / "0.chunk").write_bytes(b"")
    s = DenseStore(str(path), np.uint8, (2,))
    s.append(np.ones((1, 2), np.uint8))
    s.close()
    assert len(DenseStore(str(path))) == 1


def test_leftovers_beside_a_foreign_file_are_refused_untouched(tmp_path):
    path = tmp_path / "s"
    killed_create(path, "dense")
    (path / "notes.txt").write_bytes(b"mine")
    before = {n: (path / n).read_bytes() for n in os.listdir(path)}
    with pytest.raises(ZrecordError) as caught:
        DenseStore(str(path), np.float32, (3,))
    assert "did not finish" in str(caught.value), str(caught.value)
    assert {n: (path / n).read_bytes() for n in os.listdir(path)} == before
