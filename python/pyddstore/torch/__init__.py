"""pyddstore.torch: distributed datasets and thread loaders for PyTorch.

    import torch                                   # import torch before MPI starts
    from mpi4py import MPI
    from pyddstore.torch import DistDataset, ThreadDataLoader, sampler_kwargs

    trainset = DistDataset(my_dataset, "train", MPI.COMM_WORLD)   # each rank loads its share
    sampler = torch.utils.data.distributed.DistributedSampler(
        trainset, **sampler_kwargs(trainset))      # ranks from MPI: no process group needed
    loader = ThreadDataLoader(trainset, batch_size=128, sampler=sampler, num_workers=1)

See docs/pytorch.md (guide) and docs/reference-torch.md (reference).
"""
import os as _os

import torch as _torch  # noqa: F401

# (pyddstore's own __init__, imported first as the parent package, applies the
# libfabric settings: FI_CXI_DISABLE_HOST_REGISTER, and FI_MR_CACHE_MONITOR for
# DDSTORE_FORK_WORKERS=1.)

from ._ext import ext as _ext  # noqa: E402
from .comm import Comm, TorchComm  # noqa: E402
from .dataset import (DistDataset, DistDatasetReader, WindowedDataset, row_of,  # noqa: E402
                      sampler_kwargs)
from .budget import BudgetBatchSampler  # noqa: E402
from .loader import ThreadDataLoader  # noqa: E402
from .ragged import Packed, Padded  # noqa: E402
from .sampler import DistSampler  # noqa: E402

try:
    with open(_os.path.join(_os.path.dirname(__file__), "..", "..", "..", "ddstore-torch",
                            "VERSION")) as _fh:
        _src_version = _fh.read().strip()
except OSError:
    _src_version = None
__version__ = getattr(_ext, "__version__", None) or _src_version

__all__ = ["DistDataset", "DistDatasetReader", "WindowedDataset", "row_of",
           "sampler_kwargs", "DistSampler", "ThreadDataLoader", "BudgetBatchSampler",
           "Packed", "Padded", "TorchComm", "Comm", "__version__"]
