"""DistSampler: a shuffling distributed sampler in constant memory, with an
exact, world-size-independent state.

The epoch's *global order* is a keyed bijection ``perm`` of ``[0, N)``
computed per position (a Feistel network over the next power of four, with
cycle walking back into ``[0, N)``; round keys from ``(seed, epoch)``: the
torch extension's feistel, dataset.cpp), so no permutation is ever stored.  Rank ``r`` of ``W`` takes the global positions
``r, r + W, r + 2W, ...`` exactly as ``torch.utils.data.DistributedSampler``
takes ``indices[r::W]``: after every rank has taken ``c`` indices, the global
positions ``[0, c·W)`` have been consumed — a prefix, whatever the batch size.
That prefix length is the sampler's state, and any world size can continue
from it.
"""

import numbers
import operator

import numpy as np
import torch
from torch.utils.data import Sampler

from ._ext import ext

__all__ = ["DistSampler"]

STATE_FORMAT = "ddstore.DistSampler"    # the state dict (checked by sampler.cpp)
STATE_VERSION = 1
MAX_N = 1 << 62            # positions + padding stay below 2**63
_CHUNK = 1 << 16           # indices computed per step
_M64 = (1 << 64) - 1


class _Feistel:
    """The keyed bijection of [0, n) for (seed, epoch) (the module's doc), per
    position: the torch extension's feistel (BudgetBatchSampler uses it too)."""

    def __init__(self, n, seed, epoch):
        self.key = (n, seed & _M64, epoch & _M64)

    def forward(self, x, inverse=False):
        return ext.feistel(*self.key, torch.from_numpy(np.array(x, dtype=np.int64)),
                           inverse).numpy()

    def inverse(self, y):
        return self.forward(y, True)


def _default_world(dataset):
    """(num_replicas, rank) from the dataset's communicator (DistDataset,
    WindowedDataset, DistDatasetReader, Subset/ConcatDataset of them), else
    from torch.distributed, as DistributedSampler does."""
    from .dataset import sampler_kwargs
    if not isinstance(dataset, numbers.Integral):
        try:
            kw = sampler_kwargs(dataset)
        except TypeError:
            pass
        else:
            return kw["num_replicas"], kw["rank"]
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    raise ValueError("DistSampler: num_replicas and rank were not given, the dataset is not "
                     "a DistDataset (whose communicator would give them) and "
                     "torch.distributed is not initialised: pass num_replicas= and rank=")


class DistSampler(Sampler):
    """DistSampler(dataset, num_replicas=None, rank=None, shuffle=True, seed=0,
    drop_last=False)

    A drop-in for ``torch.utils.data.distributed.DistributedSampler`` that
    never materialises the permutation (O(1) memory at any N) and whose state
    resumes exactly at any world size.

    - ``dataset``: anything with ``len()`` (or the length as an int).
    - ``num_replicas`` / ``rank``: default from the DistDataset's communicator
      (as ``sampler_kwargs``), else from torch.distributed.
    - Rank ``r`` takes global positions ``S + r, S + r + W, ...`` of the
      epoch's order (``S`` = 0, or the position a loaded state resumes at);
      every rank gets the same count.  ``drop_last=False`` pads with the first
      positions of the order (as DistributedSampler does); ``drop_last=True``
      drops the last ``(N - S) mod W`` positions.
    - ``shuffle=False``: the order is ``0 .. N-1`` (DistributedSampler's
      exactly).
    - ``state_dict()`` / ``load_state_dict()``: the global position reached.
    """

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0,
                 drop_last=False):
        n = ext.sampler_len(dataset, MAX_N)       # TypeError / ValueError as documented
        if num_replicas is None or rank is None:
            w, r = _default_world(dataset)
            num_replicas = w if num_replicas is None else num_replicas
            rank = r if rank is None else rank
        num_replicas, rank, seed = ext.sampler_args(num_replicas, rank, seed)
        self.dataset = None if isinstance(dataset, numbers.Integral) else dataset
        self.n = n
        self.num_replicas, self.rank, self.seed = num_replicas, rank, seed
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.epoch = 0
        self._start = 0        # global position this epoch's iterations start at
        self._track = None     # (i, j, list iterator) of the latest iterator's chunk
        self._active = 0       # iterators started and not finished

    # -- the order ----------------------------------------------------------
    def _perm(self, p, inverse=False):
        """The keyed order (inverse: its inverse) at int64 positions p."""
        if not self.shuffle or self.n <= 1:
            return p.copy()
        return _Feistel(self.n, self.seed, self.epoch).forward(p, inverse)

    def order(self, positions):
        """The samples at global `positions` (ints in [0, N)) of this epoch's
        order: a numpy int64 array."""
        p = np.asarray(positions, dtype=np.int64)
        if p.size and (p.min() < 0 or p.max() >= self.n):
            raise IndexError(f"DistSampler.order: positions must be in [0, {self.n})")
        return self._perm(p)

    def position_of(self, indices):
        """The inverse of `order`: the global positions of sample `indices`."""
        x = np.asarray(indices, dtype=np.int64)
        if x.size and (x.min() < 0 or x.max() >= self.n):
            raise IndexError(f"DistSampler.position_of: indices must be in [0, {self.n})")
        return self._perm(x, inverse=True)

    def _local(self, i, j):
        """This rank's indices i .. j-1 of the current iteration (numpy int64):
        global positions start + rank + k·W, past N the first ones again."""
        p = np.arange(i, j, dtype=np.int64) * self.num_replicas + (self._start + self.rank)
        if self._start + self.rank + (j - 1) * self.num_replicas >= self.n:
            np.remainder(p, self.n, out=p)
        return self._perm(p)

    # -- Sampler ------------------------------------------------------------
    def __len__(self):
        rest = max(self.n - self._start, 0)
        if self.drop_last:
            return rest // self.num_replicas
        return -(-rest // self.num_replicas)

    def __iter__(self):
        count = len(self)
        self._active += 1
        tok = object()
        self._tok = tok
        self._track = (0, 0, None)
        try:
            i = 0
            while i < count:
                j = min(i + _CHUNK, count)
                it = iter(self._local(i, j).tolist())
                if self._tok is tok:
                    self._track = (i, j, it)
                yield from it
                i = j
            if self._tok is tok:
                self._track = (count, count, None)
        finally:
            self._active -= 1

    def set_epoch(self, epoch):
        """Use epoch `epoch`'s order (call before each epoch, as with
        DistributedSampler).  Another epoch than the current one starts at
        position 0; the same epoch keeps a loaded state's position.
        ValueError for a negative epoch (load_state_dict refuses its state)."""
        epoch = operator.index(epoch)
        if epoch < 0:
            raise ValueError(f"DistSampler.set_epoch: epoch={epoch} is negative "
                             f"(epochs are >= 0)")
        if epoch != self.epoch:
            self.epoch = epoch
            self._start = 0
            self._track = None

    # -- state --------------------------------------------------------------
    def _yielded(self):
        if self._track is None:
            return 0
        i, j, it = self._track
        return j if it is None else j - operator.length_hint(it)

    def state_dict(self, consumed=None):
        """A plain dict: the epoch and the global position reached.

        `consumed`: how many of this epoch's indices this rank has used (e.g.
        ``steps * batch_size`` with a DataLoader that prefetches); default:
        how many the latest iterator has yielded.  ThreadDataLoader's
        state_dict() passes the samples of the batches it delivered."""
        c = self._yielded() if consumed is None else operator.index(consumed)
        if not 0 <= c <= len(self):
            raise ValueError(f"DistSampler.state_dict: consumed={c} is not in "
                             f"[0, {len(self)}] (this rank's indices this epoch)")
        return {"format": STATE_FORMAT, "version": STATE_VERSION, "n": self.n,
                "seed": self.seed, "shuffle": self.shuffle, "epoch": self.epoch,
                "position": self._start + c * self.num_replicas,
                "num_replicas": self.num_replicas}

    def load_state_dict(self, state):
        """Continue from `state` (from any world size): the next iteration of
        ``state["epoch"]`` covers the global positions from
        ``state["position"]`` on.  ValueError naming the field if the state
        is not from a sampler of this dataset length, seed and shuffle, or is
        damaged; RuntimeError while an iterator of this sampler is running."""
        if self._active:
            raise RuntimeError("DistSampler.load_state_dict while an iterator of this "
                               "sampler is running (finish or drop it first)")
        epoch, pos = ext.sampler_state_check(state, self.n, self.seed, self.shuffle)
        self.epoch = epoch
        self._start = pos
        self._track = None

    def __repr__(self):
        return (f"DistSampler(n={self.n}, num_replicas={self.num_replicas}, rank={self.rank}, "
                f"shuffle={self.shuffle}, seed={self.seed}, drop_last={self.drop_last}, "
                f"epoch={self.epoch}, start={self._start})")

