"""train_dict and zstd_dict stores: every source kind, tiers, errors."""

import numpy as np
import pytest

from loaderx.utils import train_dict
from loaderx.zrecord import DICT_TIERS, DenseStore, RaggedStore, ZrecordError


def tiles(n=400, seed=0):
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 255, size=(16, 16), dtype=np.uint8)
    out = np.repeat(base[None], n, axis=0)
    out[:, :4] = rng.integers(0, 255, size=(n, 4, 16), dtype=np.uint8)
    return out


def test_tiers():
    assert DICT_TIERS == {
        "fast": {"size": 32 << 10, "samples": 4 << 20},
        "balanced": {"size": 128 << 10, "samples": 16 << 20},
        "max": {"size": 1 << 20, "samples": 64 << 20},
    }
    with pytest.raises(ValueError):
        train_dict(tiles(), tier="huge")


@pytest.mark.parametrize("tier", ["fast", None])
def test_array_source_dense_store(tier, tmp_path):
    data = tiles()
    d = train_dict(data, tier=tier, path=tmp_path / "dict.bin")
    assert isinstance(d, bytes) and 0 < len(d) <= DICT_TIERS[tier or "balanced"]["size"]
    assert (tmp_path / "dict.bin").read_bytes() == d
    with DenseStore("d", data.dtype, data.shape[1:], codec="zstd_dict", dict_bytes=d) as ds:
        assert ds.has_dict() and ds.codec == "zstd_dict"
        ds.append(data)
        np.testing.assert_array_equal(ds[::7], data[::7])
    with DenseStore("d") as ds:
        assert ds.has_dict()
        np.testing.assert_array_equal(ds[:], data)
        with pytest.raises(ValueError):
            DenseStore("other", np.uint8, (16, 16), codec="zstd", dict_bytes=d)


def test_iterable_and_store_sources():
    data = tiles(300, 1)
    d1 = train_dict(iter(list(data)), tier="fast")
    d2 = train_dict([r.tobytes() for r in data], tier="fast")
    with DenseStore("src", data.dtype, (16, 16)) as s:
        s.append(data)
        d3 = train_dict(s, tier="fast")
    seqs = [r.reshape(-1)[: 64 + i % 100] for i, r in enumerate(data)]
    with RaggedStore("rsrc", np.uint8) as rs:
        rs.append(seqs)
        d4 = train_dict(rs, tier="fast")
    for d in (d1, d2, d3, d4):
        assert len(d) > 0
    with RaggedStore("tok", np.uint8, codec="zstd_dict", dict_bytes=d4) as rs:
        rs.append(seqs)
        for got, want in zip(rs[:], seqs):
            np.testing.assert_array_equal(got, want)


def test_recode_loop_from_readme():
    data = tiles(200, 2)
    with DenseStore("src", data.dtype, data.shape[1:]) as s:
        s.append(data)
    CHUNK = 64
    with DenseStore("src") as s, \
         DenseStore("dst", dtype=s.dtype, item_shape=s.item_shape,
                    codec="zstd_dict", dict_bytes=train_dict(s)) as d:
        for start in range(0, len(s), CHUNK):
            d.append(s[start:start + CHUNK])
    with DenseStore("dst") as d:
        np.testing.assert_array_equal(d[:], data)


def test_training_failure_is_an_error():
    with pytest.raises((ZrecordError, ValueError)):
        train_dict(np.zeros((2, 4), np.uint8))
    with pytest.raises(ValueError):
        train_dict([])
