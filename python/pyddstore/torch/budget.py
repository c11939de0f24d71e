"""BudgetBatchSampler: batches capped by the total size of ragged fields.

Each rank owns a fixed share of the samples for the sampler's life (shuffle:
a keyed pseudo-random partition from `seed`; else contiguous blocks), reads
their sizes once (``dataset.sizes()``: index entries only, no payload) and
caches them.  Every epoch it shuffles its share from ``(seed, epoch)`` and
packs it greedily into batches whose cost (the sum of the chosen fields'
sizes) stays within the budget.  The ranks then agree on the number of
steps (an allgather of one integer per rank at construction and in
``set_epoch``): the maximum, the ranks with fewer batches repeating their
first batches (``drop_last=False``, as DistributedSampler pads), or the
minimum, the other ranks dropping their last batches (``drop_last=True``).
"""

import operator
import warnings

import numpy as np
import torch
from torch.utils.data import Sampler

from ._ext import ext
from .dataset import _share as _block
from .sampler import _Feistel, _default_world

__all__ = ["BudgetBatchSampler"]

_CHUNK = 1 << 16            # sizes read per call
_SHARE_EPOCH = (1 << 64) - 1   # the Feistel key of the partition (not an epoch's)


class BudgetBatchSampler(Sampler):
    """BudgetBatchSampler(dataset, budget, field=None, shuffle=True, seed=0,
    drop_last=False, num_replicas=None, rank=None, comm=None)

    Yields lists of sample indices whose total size (the sum over `field`,
    one ragged field key or a list of them; default: the dataset's only
    ragged field) is at most `budget`.  A sample larger than the budget on
    its own forms a batch of its own (a RuntimeWarning once per sampler
    names how many such samples this rank has).

    Collective over the ranks (the dataset's communicator, or `comm`): the
    constructor and ``set_epoch`` (call it on every rank before each epoch)
    agree on the number of steps, ``len(sampler)``, the same on every rank.
    """

    def __init__(self, dataset, budget, field=None, shuffle=True, seed=0, drop_last=False,
                 num_replicas=None, rank=None, comm=None):
        if not callable(getattr(dataset, "sizes", None)):
            raise TypeError("BudgetBatchSampler needs a DistDataset or DistDatasetReader "
                            f"with ragged fields (sizes()), got {type(dataset).__name__}")
        n = len(dataset)
        if num_replicas is None or rank is None:
            w, r = _default_world(dataset)
            num_replicas = w if num_replicas is None else num_replicas
            rank = r if rank is None else rank
        # budget, seed, num_replicas and rank checked in C++
        budget, seed, num_replicas, rank = ext.budget_args(budget, seed, num_replicas, rank)
        comm = comm if comm is not None else getattr(dataset, "comm", None)
        if comm is None and num_replicas > 1:
            raise ValueError("BudgetBatchSampler: the ranks agree on the number of steps: "
                             "pass comm= (an mpi4py communicator or a pyddstore.torch Comm) "
                             "for a dataset without one (DistDatasetReader)")
        if field is None:
            fields = [dataset._ragged_field(None, "BudgetBatchSampler").key]
        elif isinstance(field, (list, tuple)):
            fields = list(field)
        else:
            fields = [field]
        for f in fields:
            dataset._ragged_field(f, "BudgetBatchSampler")     # raises for a fixed field
        self.dataset = dataset
        self.budget = budget
        self.fields = fields
        self.shuffle = bool(shuffle)
        self.seed = seed
        self.drop_last = bool(drop_last)
        self.num_replicas = num_replicas
        self.rank = rank
        self.comm = comm
        self.n = n
        self.epoch = 0
        self.indices = self._share()
        self.costs = self._costs()
        big = int(np.count_nonzero(self.costs > self.budget))
        if big:
            warnings.warn(f"BudgetBatchSampler: {big} sample(s) of rank {rank} exceed the "
                          f"budget {self.budget} (largest {int(self.costs.max())}); each "
                          "forms a batch of its own", RuntimeWarning, stacklevel=2)
        self._agree()

    # -- this rank's share and its sizes (once) ------------------------------
    def _share(self):
        n, w, r = self.n, self.num_replicas, self.rank
        if not self.shuffle or n <= 1:
            return np.arange(*_block(n, r, w), dtype=np.int64)
        pos = np.arange(r, n, w, dtype=np.uint64)
        return np.sort(_Feistel(n, self.seed, _SHARE_EPOCH).forward(pos).astype(np.int64))

    def _costs(self):
        costs = np.zeros(self.indices.size, dtype=np.int64)
        for f in self.fields:
            for i in range(0, self.indices.size, _CHUNK):
                costs[i:i + _CHUNK] += self.dataset.sizes(f, self.indices[i:i + _CHUNK])
        return costs

    # -- the epoch's batches ------------------------------------------------------
    def _order(self):
        if not self.shuffle:
            return np.arange(self.indices.size)
        rng = np.random.Generator(np.random.PCG64([self.seed & ((1 << 63) - 1),
                                                   self.epoch, self.rank]))
        return rng.permutation(self.indices.size)

    def batches(self):
        """This rank's batches of the current epoch before the ranks agree
        (lists of dataset indices)."""
        order = self._order()
        return ext.budget_batches(torch.from_numpy(self.indices[order]),
                                  torch.from_numpy(self.costs[order]),
                                  min(self.budget, (1 << 63) - 1))

    def _agree(self):
        self._batches = self.batches()
        mine = len(self._batches)
        counts = [mine] if self.comm is None or self.num_replicas == 1 else \
            list(self.comm.allgather(mine))
        steps = min(counts) if self.drop_last else max(counts)
        if steps and not all(counts):
            empty = [r for r, c in enumerate(counts) if c == 0]
            raise ValueError(f"BudgetBatchSampler: rank(s) {empty} have no samples (more "
                             f"replicas than samples?); every rank needs one, or "
                             "drop_last=True")
        self.counts = counts
        self.steps = steps

    def set_epoch(self, epoch):
        """Collective: the batches of epoch `epoch` (order from (seed,
        epoch)); every rank calls it before the epoch."""
        self.epoch = operator.index(epoch)
        self._agree()

    def __len__(self):
        return self.steps

    def __iter__(self):
        bs = self._batches
        for s in range(self.steps):
            yield list(bs[s % len(bs)])

    def __repr__(self):
        return (f"BudgetBatchSampler(budget={self.budget}, fields={self.fields!r}, rank "
                f"{self.rank} of {self.num_replicas}, {self.indices.size} samples, "
                f"{self.steps} steps)")
