"""loaderx: typed persistent record stores and an endless step-based loader.

A drop-in replacement for ``loaderx`` 1.7.2, with a Rust core. The public API
is imported from its layer, exactly as in the reference package:

    from loaderx.utils      import train_dict
    from loaderx.zrecord    import DenseStore, RaggedStore, ZrecordError
    from loaderx.dataloader import DataLoader
    from loaderx.zsampler   import Sampler

plus what the reference lacks: ``loaderx.io`` (a parallel ``loadtxt`` and
``.npy`` readers), read-only opening (``DenseStore(path, read_only=True)``),
``level=`` and ``durability=`` on the stores, ``DenseStore.gather_into`` and
``RaggedStore.gather_packed``, ``verify()`` on both stores,
``Sampler.batch_at``, and on the loader
sharding / exact resume (``DataLoader(..., rank=, world=, start_step=)``),
``allocate=`` (gather into memory you own, e.g. pinned tensors) and
``packed=`` (a ragged batch as one array + offsets).

Stores written by this package are read bit-exactly by loaderx 1.7.2 and the
other way round: the on-disk format is the same.
"""

__version__ = "1.7.2"
