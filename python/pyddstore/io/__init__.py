"""pyddstore.io: the files a field writes, straight into the store's shards.

Readers (used by ``DistDataset.from_adios`` / ``from_hdf5`` /
``from_parquet``, pyddstore.torch.ingest): each opens a file on every rank
and describes it as *keys* (:class:`Key`: dtype, per-sample shape, the
dimension along which samples are concatenated) and reads one contiguous
selection of samples per key into the memory that becomes the rank's shard.
No per-sample Python: sizes come as arrays, payloads as one read per key.

Writers (:func:`write_adios`, :func:`write_hdf5`, :func:`write_parquet`) write
the same layouts, for converting a map-style dataset once and for tests.

Layouts: docs/files.md.  The optional packages are extras
(``pip install "pyddstore[adios2]"``, ``[hdf5]``, ``[parquet]``); without
one, an ImportError naming the extra.
"""

from ._source import Key, Source, need  # noqa: F401
from .adios import AdiosSource, write_adios, write_adios_columns  # noqa: F401
from .hdf5 import Hdf5Source, write_hdf5, write_hdf5_columns  # noqa: F401
from .parquet import ParquetSource, write_parquet  # noqa: F401

__all__ = ["Key", "Source", "AdiosSource", "write_adios", "write_adios_columns",
           "Hdf5Source", "write_hdf5", "write_hdf5_columns", "ParquetSource",
           "write_parquet"]
