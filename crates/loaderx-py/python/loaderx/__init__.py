"""loaderx: typed persistent record stores and an endless step-based loader.

A drop-in replacement for ``loaderx`` 1.7.2, with a Rust core. The public API
is imported from its layer, exactly as in the reference package:

    from loaderx.utils      import train_dict
    from loaderx.zrecord    import DenseStore, RaggedStore, ZrecordError
    from loaderx.dataloader import DataLoader
    from loaderx.zsampler   import Sampler

plus what the reference lacks: ``loaderx.io`` (a parallel ``loadtxt`` and
``.npy`` readers), read-only opening (``DenseStore(path, read_only=True)``),
and sharding / exact resume on the loader (``DataLoader(..., rank=, world=,
start_step=)``).

Stores written by this package are read bit-exactly by loaderx 1.7.2 and the
other way round: the on-disk format is the same.
"""

__version__ = "1.7.2"
