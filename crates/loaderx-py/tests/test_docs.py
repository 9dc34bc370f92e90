"""Every ```python block of this repository's README.md and docs/*.md runs
as written (the variables a snippet assumes are prepared first, and the
distributed runtimes it imports are replaced by stubs reporting rank 1 of 2).
A doc example that stopped matching the API fails here."""

import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from conftest import ours_only

pytestmark = ours_only

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def blocks():
    for doc in DOCS:
        text = doc.read_text()
        for m in BLOCK.finditer(text):
            line = text[: m.start()].count("\n") + 1
            yield pytest.param(m.group(1), id=f"{doc.name}:{line}")


def test_the_docs_have_python_examples():
    assert len(list(blocks())) >= 3


def _stub_runtimes(monkeypatch):
    """torch.distributed and jax as far as the docs use them: rank 1 of 2."""
    dist = types.ModuleType("torch.distributed")
    dist.init_process_group = lambda *a, **k: None
    dist.get_rank = lambda: 1
    dist.get_world_size = lambda: 2
    torch = types.ModuleType("torch")
    torch.distributed = dist

    class Tensor:
        """What the GPU-feeding example uses: from_numpy, pin_memory, to."""

        def __init__(self, a):
            self.a = a

        def pin_memory(self):
            return Tensor(self.a.copy())

        def to(self, device, non_blocking=False):
            assert device == "cuda"
            return Tensor(self.a)

    torch.from_numpy = Tensor

    class PinnedTensor(Tensor):
        """torch.empty(..., pin_memory=True): numpy.asarray views it."""

        def __array__(self, dtype=None, copy=None):
            return self.a

    def empty(shape, dtype=None, pin_memory=False):
        assert pin_memory
        return PinnedTensor(np.full(shape, 77, dtype))

    torch.empty = empty
    torch.uint8, torch.int64 = np.uint8, np.int64
    jax = types.ModuleType("jax")
    jax.distributed = types.SimpleNamespace(initialize=lambda *a, **k: None)
    jax.process_index = lambda: 1
    jax.process_count = lambda: 2
    for name, mod in (("torch", torch), ("torch.distributed", dist), ("jax", jax)):
        monkeypatch.setitem(sys.modules, name, mod)


@pytest.mark.parametrize("code", list(blocks()))
def test_doc_example_runs(code, monkeypatch):
    _stub_runtimes(monkeypatch)
    # What the sharding snippets assume: a dataset size, a global batch and
    # a checkpointed step range.
    env = {"np": np, "n": 1000, "global_batch": 64, "start_step": 3, "total_steps": 6,
           "steps": 3}
    if 'DenseStore("data/image"' in code:
        # The GPU-feeding example reads an image and a label store.
        from loaderx.zrecord import DenseStore
        with DenseStore("data/image", np.uint8, (8, 8, 3)) as s:
            s.append(np.zeros((300, 8, 8, 3), np.uint8))
        with DenseStore("data/label", np.int64, ()) as s:
            s.append(np.arange(300))
    exec(compile(code, "<doc>", "exec"), env)
    if "to_torch" in env or "pinned" in env:
        x, y = env["x"], env["y"]
        assert x.a.shape == (256, 8, 8, 3) and y.a.shape == (256,)
    if "cu_seqlens" in env:
        # The packed-sequences example: 64 sequences back to back.
        t, cu, shapes = env["tokens"], env["cu_seqlens"], env["shapes"]
        assert len(cu) == 65 and cu[-1] == len(t)
        assert [s[0] for s in shapes] == list(np.diff(cu)) and env["max_seqlen"] >= 16
        assert (t[cu[1]:cu[2]] == np.arange(cu[2] - cu[1])).all()
    if "pinned" in env:
        # Gathered into the "pinned" tensors: the records, not their fill.
        assert y.a.dtype == np.int64 and (y.a < 300).all() and not x.a.any()
    if "sampler" in env:
        # Rank 1 of 2 draws its half of the global batch.
        assert env["sampler"].next().shape == (32,)
