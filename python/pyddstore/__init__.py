"""pyddstore: a distributed in-memory data store for data-parallel training.

Each rank holds a shard of every variable; any rank reads any global row with
one-sided reads (MPI RMA, or libfabric RDMA).  ``PyDDStore`` works on numpy
arrays and any other object with the buffer protocol; ``pyddstore.torch``
(needs PyTorch) adds tensors, ``DistDataset`` and ``ThreadDataLoader``.

Importing pyddstore does not import torch or mpi4py and does not start MPI:
MPI starts when the first store over MPI is created (and, if pyddstore
started it, is finalised at interpreter exit after every store is freed).
"""
import os as _os


def _apply_fabric_env():
    """libfabric settings read when libfabric starts (so: before it does).

    - ``FI_CXI_DISABLE_HOST_REGISTER=1`` unless set: skip GPU-runtime
      registration of CXI host buffers, which fails after fork.
    - ``DDSTORE_FORK_WORKERS=1``: ``FI_MR_CACHE_MONITOR=memhooks`` when that
      variable is unset or ``kdreg2`` (kdreg2 does not work in forked
      processes).
    """
    env = _os.environ
    if "FI_CXI_DISABLE_HOST_REGISTER" not in env:
        env["FI_CXI_DISABLE_HOST_REGISTER"] = "1"
    fork = env.get("DDSTORE_FORK_WORKERS", "").strip().lower()
    if fork in ("1", "true", "yes", "on"):
        if env.get("FI_MR_CACHE_MONITOR", "") in ("", "kdreg2"):
            env["FI_MR_CACHE_MONITOR"] = "memhooks"


_apply_fabric_env()

from ._core import (  # noqa: E402  (the environment must be set first)
    HAVE_MPI,
    HAVE_OFI,
    FileComm,
    DDStoreError,
    DDStoreKeyError,
    PyDDStore,
    Reader,
    __version__,
)

__all__ = [
    "PyDDStore",
    "Reader",
    "DDStoreError",
    "DDStoreKeyError",
    "HAVE_MPI",
    "HAVE_OFI",
    "FileComm",
    "__version__",
]
