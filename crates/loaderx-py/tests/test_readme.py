"""The seed README's examples, run verbatim (code blocks copied unchanged;
only the data they assume is prepared first)."""

import textwrap

import numpy as np


QUICK_START = '''
from loaderx.zrecord import DenseStore
from loaderx.dataloader import DataLoader

data = np.load('data.npy', mmap_mode='r')
label = np.load('label.npy', mmap_mode='r')
with DenseStore('train_data', data.dtype, data.shape[1:]) as ds:
    ds.append(data)
with DenseStore('train_label', label.dtype, label.shape[1:]) as ds:
    ds.append(label)

loader = DataLoader({'data': DenseStore('train_data'), 'label': DenseStore('train_label')},
                    transform=lambda batch: batch)

for i, batch in enumerate(loader):
    if i >= 256:
        break

print(batch['data'].shape)
print(batch['label'].shape)
'''

RECORDS = '''
import numpy as np
from loaderx.zrecord import DenseStore

data = np.arange(64, dtype=np.float32).reshape(8, 2, 4)
with DenseStore('data', data.dtype, data.shape[1:]) as ds:
    ds.append(data)
ds = DenseStore('data')
ds[0, 5, 2]                          # (3, 2, 4) — shape from the persisted identity
'''

RAGGED = '''
from loaderx.zrecord import RaggedStore

seqs = [np.arange(L, dtype=np.int32) for L in (3, 1, 4, 1, 5)]
with RaggedStore('tokens', np.int32) as rs:
    rs.append(seqs)                       # dtype explicit; each record keeps its shape
rs = RaggedStore('tokens')

records = rs[0, 2, 4]                # list of ndarray — one per record, exact shapes
lengths = np.array([len(r) for r in records])
padded = np.zeros((len(records), lengths.max()), dtype=records[0].dtype)
for i, r in enumerate(records):
    padded[i, :len(r)] = r             # (B, max_len) — your policy, your loop
'''

WRITABLE = '''
from loaderx.zrecord import DenseStore, RaggedStore

ds = DenseStore('mnist/x', dtype=np.uint8, item_shape=(28, 28))  # type identity committed now
ds.append(images[i:i + 1024])        # (B, 28, 28) → one batch, returns first index
ds.append(single_image[None])        # one sample is batch_size 1 — add the axis yourself
ds[:4]                               # read path is unchanged

tok = RaggedStore('tokens', dtype=np.int32)     # each record keeps its own shape
tok.append([seq_a, seq_b, seq_c])    # list in, list out — `tok[0, 2]` returns a list
'''

MAINTENANCE = '''
ds.delete(np.arange(0, len(ds), 2))   # swap-last: index space stays dense, survivors reindex
ds.stats()                            # {'records', 'live_bytes', 'chunk_bytes', 'reclaimable'}
ds.compact()                          # reclaim the deleted bytes, in place — offline only
'''

DICT = '''
from loaderx.utils import train_dict
from loaderx.zrecord import DenseStore, RaggedStore

# train once on the settled data — a standalone, reusable artifact
d = train_dict(settled_array, tier="balanced")

# then any new store can install it and append explicitly
with RaggedStore('tokens', np.int32, codec='zstd_dict', dict_bytes=d) as ds:
    ds.append(token_generator)
with DenseStore('data', data.dtype, data.shape[1:],
                codec='zstd_dict', dict_bytes=d) as ds:
    ds.append(data)
'''

MULTI = '''
from loaderx.zrecord import DenseStore, RaggedStore
from loaderx.dataloader import DataLoader

root = "xsub/train"
with DenseStore(root + "/joint", joint.dtype, joint.shape[1:]) as s:
    s.append(joint)
with DenseStore(root + "/label", label.dtype, label.shape[1:]) as s:
    s.append(label)
with RaggedStore(root + "/token", np.int32) as s:
    s.append(seqs)

streams = {
    "joint": DenseStore(root + "/joint"),
    "label": DenseStore(root + "/label"),
    "token": RaggedStore(root + "/token"),
}
streams["joint"][0, 5, 2]            # each stream keeps its own index API
loader = DataLoader(streams, batch_size=256)
batch = next(loader)                      # {name: values}, index-aligned
'''

COLLATE = '''
def collate(batch):
    return {'input_ids': batch['tokens'], 'label': batch['label']}

loader = DataLoader({'tokens': dense_tokens, 'label': labelset}, batch_size=32,
                    transform=collate)
'''

SAMPLER = '''
from loaderx.zsampler import Sampler

sampler = Sampler(1_000_000, 256, Sampler.Mode.IID, seed=42)
indices = sampler.next()
'''


CREATE_DENSE = '''
import numpy as np
from loaderx.zrecord import DenseStore

data = np.load('data.npy', mmap_mode='r')
with DenseStore('train_data', data.dtype, data.shape[1:]) as ds:
    ds.append(data)
'''

OPEN_DENSE = '''
ds = DenseStore('train_data')
'''

RECODE = '''
from loaderx.utils import train_dict
from loaderx.zrecord import DenseStore

CHUNK = 1 << 16
with DenseStore("src") as s, \\
     DenseStore("dst", dtype=s.dtype, item_shape=s.item_shape,
                codec="zstd_dict", dict_bytes=train_dict(s)) as d:
    for start in range(0, len(s), CHUNK):
        d.append(s[start:start + CHUNK])       # records copied in index order
'''

TO_DEVICE = '''
import torch

device = "cuda:0"
def to_device(batch):
    return {k: torch.from_numpy(v).to(device, non_blocking=True)
            for k, v in batch.items()}

loader = DataLoader(streams, transform=to_device)
for batch in loader:
    model(batch)                        # already on device
'''

TO_DEVICE_PINNED = '''
def to_device(batch):
    return {k: torch.from_numpy(v).pin_memory().to(device, non_blocking=True)
            for k, v in batch.items()}
'''

TO_DEVICE_JAX = '''
import jax

def to_device(batch):
    return {k: jax.device_put(v) for k, v in batch.items()}
'''

def run(code, env=None):
    env = {"np": np} if env is None else env
    exec(compile(textwrap.dedent(code), "<README>", "exec"), env)
    return env


def test_quick_start(capsys):
    np.save("data.npy", np.random.default_rng(0).random((300, 3, 8), dtype=np.float32))
    np.save("label.npy", np.arange(300, dtype=np.int64))
    env = run(QUICK_START)
    assert capsys.readouterr().out.split("\n")[:2] == ["(256, 3, 8)", "(256,)"]
    env["loader"].close()


def test_records_and_ragged():
    env = run(RECORDS)
    assert env["ds"][0, 5, 2].shape == (3, 2, 4)
    env["ds"].close()
    env = run(RAGGED)
    assert env["padded"].shape == (3, 5)
    env["rs"].close()


def test_writable_and_maintenance():
    rng = np.random.default_rng(1)
    env = {"np": np, "i": 0, "images": rng.integers(0, 255, (2000, 28, 28), dtype=np.uint8),
           "single_image": np.ones((28, 28), np.uint8),
           "seq_a": np.arange(3, dtype=np.int32), "seq_b": np.arange(1, dtype=np.int32),
           "seq_c": np.arange(7, dtype=np.int32)}
    run(WRITABLE, env)
    ds, tok = env["ds"], env["tok"]
    assert len(ds) == 1025 and len(tok[0, 2]) == 2
    run(MAINTENANCE, env)
    assert len(ds) == 512
    ds.close()
    tok.close()


def test_dict_and_multistream():
    rng = np.random.default_rng(2)
    settled = np.repeat(rng.integers(0, 255, (1, 64), dtype=np.uint8), 500, axis=0)
    settled[:, :8] = rng.integers(0, 255, (500, 8), dtype=np.uint8)
    env = {"np": np, "settled_array": settled, "data": settled,
           "token_generator": (np.arange(i % 50 + 1, dtype=np.int32) for i in range(300))}
    run(DICT, env)
    n = 300
    env = {"np": np, "joint": rng.random((n, 3, 4, 2), dtype=np.float32),
           "label": np.arange(n, dtype=np.int64),
           "seqs": [np.arange(i % 9 + 1, dtype=np.int32) for i in range(n)]}
    run(MULTI, env)
    batch = env["batch"]
    assert batch["joint"].shape == (256, 3, 4, 2) and len(batch["token"]) == 256
    env["loader"].close()
    env.update(dense_tokens=env["streams"]["joint"], labelset=env["streams"]["label"])
    run(COLLATE, env)
    out = next(env["loader"])
    assert set(out) == {"input_ids", "label"} and out["input_ids"].shape[0] == 32
    env["loader"].close()
    for s in env["streams"].values():
        s.close()


def test_sampler_example():
    env = run(SAMPLER)
    assert env["indices"].shape == (256,)


def test_create_and_open_dense():
    data = np.random.default_rng(3).random((50, 3, 4), dtype=np.float32)
    np.save("data.npy", data)
    env = run(CREATE_DENSE)
    run(OPEN_DENSE, env)
    np.testing.assert_array_equal(env["ds"][:], data)
    env["ds"].close()


def test_recode_copy_loop():
    from loaderx.zrecord import DenseStore
    src = (np.arange(3000 * 256) % 61).astype(np.uint8).reshape(3000, 16, 16)
    with DenseStore("src", src.dtype, src.shape[1:]) as s:
        s.append(src)
    run(RECODE)
    with DenseStore("dst") as d:
        assert d.codec == "zstd_dict" and d.item_shape == (16, 16)
        np.testing.assert_array_equal(d[:], src)


class _Stop(Exception):
    """Ends the README's endless ``for batch in loader`` loop."""


def test_cpu_to_device_transforms(monkeypatch):
    """The three device-transfer transforms, with stand-ins for torch (no
    CUDA here) and jax that record what they were handed."""
    import sys
    import types

    class Tensor:
        def __init__(self, a):
            assert isinstance(a, np.ndarray)
            self.a = a

        def to(self, device, non_blocking=False):
            assert device == "cuda:0" and non_blocking
            return self

        def pin_memory(self):
            return Tensor(self.a.copy())

    torch = types.ModuleType("torch")
    torch.from_numpy = Tensor
    jax = types.ModuleType("jax")
    jax.device_put = Tensor
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "jax", jax)

    from loaderx.dataloader import DataLoader
    from loaderx.zrecord import DenseStore
    x = np.arange(600 * 4, dtype=np.float32).reshape(600, 4)
    with DenseStore("x", x.dtype, x.shape[1:]) as s:
        s.append(x)
    with DenseStore("y", np.int64, ()) as s:
        s.append(np.arange(600))
    streams = {"x": DenseStore("x"), "y": DenseStore("y")}
    seen = []

    def model(batch):
        np.testing.assert_array_equal(batch["x"].a, x[batch["y"].a])
        seen.append(batch)
        if len(seen) == 3:
            raise _Stop

    env = {"np": np, "DataLoader": DataLoader, "streams": streams, "model": model}
    try:
        run(TO_DEVICE, env)
    except _Stop:
        pass
    env["loader"].close()
    assert len(seen) == 3
    for block in (TO_DEVICE_PINNED, TO_DEVICE_JAX):
        run(block, env)
        loader = DataLoader(streams, transform=env["to_device"])
        model(next(loader))
        loader.close()
    assert len(seen) == 5
    for s in streams.values():
        s.close()
