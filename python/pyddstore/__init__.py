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

# PSM and PSM2 (libinfinipath, libpsm2), which Debian's libfabric links, catch
# SIGINT when they are loaded (with _core, below) to print a backtrace and
# exit(): Ctrl-C would end the program at once with status 1, without
# KeyboardInterrupt, finally blocks or atexit.  Open MPI sets these two for
# the same reason; a value of the user's wins.
_os.environ.setdefault("IPATH_NO_BACKTRACE", "1")
_os.environ.setdefault("HFI_NO_BACKTRACE", "1")

# The package's own libddstore.so first: the extension modules name it by its
# bare SONAME and find it through RUNPATH $ORIGIN, which the dynamic linker
# searches after LD_LIBRARY_PATH, so another build's libddstore.so there
# would win ("undefined symbol" at import, or two builds mixed).  Loaded
# here by path, it is the one their lookup by SONAME finds already loaded.
_own_lib = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "libddstore.so")
if _os.path.exists(_own_lib):
    import ctypes as _ctypes
    _ctypes.CDLL(_own_lib)

# Importing _core applies the libfabric settings read when libfabric starts
# (libddstore's ddstore_env_prepare: FI_CXI_DISABLE_HOST_REGISTER=1 unless
# set; FI_MR_CACHE_MONITOR=memhooks under DDSTORE_FORK_WORKERS=1), before
# anything here can start libfabric or MPI; os.environ (a snapshot taken at
# start-up) is brought up to date below.
from ._core import (
    HAVE_MPI,
    HAVE_OFI,
    FileComm,
    DDStoreError,
    DDStoreKeyError,
    Reader,
    __version__,
    _fabric_env,
)

_os.environ.update(_fabric_env())

from ._store import PyDDStore  # noqa: E402  (the C store, with save / attach)

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
