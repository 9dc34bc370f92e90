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
