"""ThreadDataLoader: a DataLoader whose workers are threads.

Threads share the process's MPI and GPU context, so they read with any
method (0, 1, 2) and into GPU memory.  The sampler is consumed in the
calling thread exactly as DataLoader does (same random draws, same order);
``num_workers * prefetch_factor`` batches are in flight.  The per-batch work
is C++ (ddstore-torch/csrc/loader.cpp: ext.Batches; pipeline.cpp): with the
default collate_fn and a DistDataset the worker threads are C++ threads that
read every field straight into the batch tensors and never take the GIL
(direct collate); with a user dataset or collate_fn they are Python threads
that call it.  What stays here: DataLoader's arguments, the user's objects
(dataset, sampler, collate_fn, worker_init_fn), thread readers and buffers.
"""

import inspect
import threading
import time
import weakref

import torch
from torch.utils.data import DataLoader, IterableDataset
from torch.utils.data import _utils as _tud_utils

from pyddstore import _backends

from . import env
from . import report as _report
from ._ext import ext
from .sampler import DistSampler

__all__ = ["ThreadDataLoader"]

_DEFAULT_COLLATES = {_tud_utils.collate.default_collate,
                     getattr(torch.utils.data, "default_collate", None)} - {None}
_HAS_IN_ORDER = "in_order" in inspect.signature(DataLoader.__init__).parameters


class NoAllocError(TypeError, ValueError):
    """reuse_buffers=True over a dataset without alloc(): a TypeError (the
    dataset's type is wrong) that is also a ValueError (what it was)."""


def _store_datasets(ds):
    """DistDataset-like objects reachable from `ds` (through .dataset / .datasets
    of Subset, ConcatDataset, WindowedDataset ...)."""
    out, seen, todo = [], set(), [ds]
    while todo:
        d = todo.pop()
        if id(d) in seen:
            continue
        seen.add(id(d))
        if hasattr(d, "_store_datasets"):
            if hasattr(d, "_bind_reader"):
                out.append(d)
            else:
                todo.extend(d._store_datasets())
            continue
        todo.extend([x for x in [getattr(d, "dataset", None)] if x is not None])
        todo.extend(getattr(d, "datasets", None) or ())
    return out


class ThreadDataLoader(DataLoader):
    """ThreadDataLoader(dataset, reuse_buffers=False, collate_copies=False,
    report=None, **DataLoader args)

    A DataLoader with worker threads instead of processes (safe with MPI and
    GPU buffers).  ``num_workers`` threads fetch, collate and pin;
    ``num_workers * prefetch_factor`` batches are prefetched; ``iter(loader)``
    gives an independent per-epoch iterator; random draws match DataLoader's.

    - Parallel reads (methods 1, 2): each worker thread has its own reader;
      ``DDSTORE_THREAD_READERS=0`` shares the store.
    - Direct batch reads: with the default collate_fn, a DistDataset's fields
      are read straight into the batch tensors (``DDSTORE_FAST_COLLATE=0``
      turns it off).
    - ``reuse_buffers=True``: one ``dataset.alloc(batch_size)`` buffer set per
      worker, registered once; requires ``batch_size`` with the default
      collate_fn (which copies), or ``collate_copies=True`` for a custom
      collate_fn that copies.
    - ``report=True`` logs a summary of each epoch (where the time went,
      gathered over the ranks) on rank 0 at the epoch's end; a path also
      appends the figures there as one JSON line per epoch; ``None`` (the
      default) follows ``DDSTORE_LOADER_REPORT``, ``False`` turns it off.
      Collective at the epoch's end: set it on every rank.
    - ``close()`` waits for fetches in flight and unregisters buffers.
    - ``DDSTORE_AFFINITY_WIDTH`` / ``DDSTORE_AFFINITY_OFFSET`` pin workers.
    """

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None,
                 batch_sampler=None, num_workers=0, collate_fn=None, pin_memory=False,
                 drop_last=False, timeout=0, worker_init_fn=None,
                 multiprocessing_context=None, generator=None, *, prefetch_factor=None,
                 persistent_workers=False, pin_memory_device="", in_order=True,
                 reuse_buffers=False, collate_copies=False, report=None):
        prefetch_factor = ext.loader_args(num_workers, prefetch_factor,
                                          bool(persistent_workers),
                                          multiprocessing_context is not None,
                                          isinstance(dataset, IterableDataset))
        # the settings, read once (a bad value raises here, naming it); a
        # later change of the environment does not apply to this loader
        cfg = self._cfg = env.read()
        cfg.fast_collate, cfg.thread_readers, cfg.loader_help   # noqa: B018 - read now
        width, offset = (cfg.affinity_width, cfg.affinity_offset) if num_workers else (0, 0)
        base = offset + env.local_rank() * width   # worker w: CPU base + w % width
        self._cpus = [base + w % width if width > 0 else -1 for w in range(num_workers)]
        self._report_to = env.loader_report(report)   # None, True or a path
        kw = {"in_order": in_order} if _HAS_IN_ORDER else {}
        super().__init__(dataset, batch_size=batch_size, shuffle=shuffle, sampler=sampler,
                         batch_sampler=batch_sampler, num_workers=0, collate_fn=collate_fn,
                         pin_memory=pin_memory, drop_last=drop_last, timeout=timeout,
                         worker_init_fn=worker_init_fn, generator=generator,
                         pin_memory_device=pin_memory_device, **kw)
        self._in_order = bool(in_order)
        # DataLoader's own attributes, set after its __init__ (which needs
        # num_workers=0 to accept our threads' settings)
        object.__setattr__(self, "num_workers", num_workers)
        object.__setattr__(self, "prefetch_factor", prefetch_factor)
        self._persistent = bool(persistent_workers)
        self.reuse_buffers = bool(reuse_buffers)
        self.collate_copies = bool(collate_copies)
        self._default_collate = self.collate_fn in _DEFAULT_COLLATES
        self._stores = _store_datasets(dataset)
        if self.reuse_buffers:
            if self.batch_size is None:
                raise ValueError("reuse_buffers=True needs batch_size (buffers of batch_size "
                                 "rows are allocated once per worker)")
            if not (self._default_collate or self.collate_copies):
                raise ValueError("reuse_buffers=True reuses each worker's buffers, so the "
                                 "collate_fn must copy: use the default collate_fn, or pass "
                                 "collate_copies=True if yours copies")
            if not callable(getattr(dataset, "alloc", None)):
                raise NoAllocError(f"reuse_buffers=True needs a dataset with alloc() "
                                   f"(DistDataset, DistDatasetReader), got "
                                   f"{type(dataset).__module__}.{type(dataset).__qualname__}")
        # the workers' thread readers (methods with them) and buffer sets
        self._slots = ext.LoaderSlots(
            [d for d in self._stores if self._cfg.thread_readers and
             getattr(d, "ddstore", None) is not None and hasattr(d.ddstore, "open_reader")
             and _backends.row(getattr(d, "method", 0))["thread_readers"]],
            dataset.alloc if self.reuse_buffers else None,
            getattr(dataset, "release", None), self.batch_size or 0)
        self._runs = []                  # ext.Batches of every epoch with threads
        self._seed_drawn = self._closed = False
        self._iter_ref = self._stats = None   # the latest iterator (weak), its EpochStats
        self._epochs = self._skip = 0    # epochs begun; batches to skip (loaded state)
        self._progress = _Progress(0, 0, None)
        self._resume = None              # the loaded _Progress, for the next iter()

    # DataLoader.__iter__ builds processes for num_workers > 0; ours threads.
    def __iter__(self):
        t0 = time.perf_counter()
        if self._closed:
            raise RuntimeError("ThreadDataLoader: iter() after close()")
        # threads of finished / abandoned epochs return their slots (readers,
        # buffers) before this epoch takes them: no new registrations
        for run in [r for r in self._runs if r.stopped]:
            run.shutdown(join=True)
            self._runs.remove(run)
        it = _ThreadIter(self, t0)
        if self.num_workers:
            self._runs.append(it._b)
        self._iter_ref = weakref.ref(it)
        return it

    def _get_iterator(self):
        return self.__iter__()

    @property
    def persistent_workers(self):
        return getattr(self, "_persistent", False)

    @persistent_workers.setter
    def persistent_workers(self, v):
        pass   # DataLoader.__init__ assigns it (False, num_workers=0); keep ours

    def check_worker_number_rationality(self):
        return   # threads: no process-count warning

    @property
    def _all_slots(self):
        return self._slots.all

    def close(self):
        """Stop every iterator, wait for fetches in flight, close thread readers
        and unregister reuse_buffers buffers.  Idempotent."""
        for run in self._runs:
            run.shutdown(join=True)
        self._runs = []
        self._slots.close()
        self._closed = True

    def get_profile(self, name=None):
        """The dataset's read counters (summed over the store and every reader)."""
        return self.dataset.get_profile(name)

    # -- state (torchdata's StatefulDataLoader protocol) ---------------------
    def _dist_sampler(self):
        for s in (self.sampler, getattr(self.batch_sampler, "sampler", None)):
            if isinstance(s, DistSampler):
                return s
        return None

    def state_dict(self):
        """Where the consumer is: a plain picklable dict.  Counts only the
        batches delivered by next() (prefetched ones are fetched again after
        a resume).  With a DistSampler it holds the sampler's global position
        (resumable at any world size); with another sampler the number of
        batches to skip (the same order is then needed: a sampler whose order
        depends only on its epoch, e.g. DistributedSampler)."""
        return ext.loader_state(self._progress, self._dist_sampler(),
                                isinstance(self.dataset, IterableDataset),
                                self._in_order or not self.num_workers)

    def load_state_dict(self, state):
        """Resume from `state` at the next iter(loader).  ValueError naming the
        field for a state that does not fit this loader; RuntimeError while
        an iterator of this loader is running."""
        it = self._iter_ref() if self._iter_ref is not None else None
        if it is not None and not it._b.ended:
            raise RuntimeError("ThreadDataLoader.load_state_dict while an epoch is being "
                               "iterated: finish it or close() its iterator first")
        ds = self._dist_sampler()
        self._skip, batches, samples, key = ext.loader_load_state(
            state, ds, type(ds or self.sampler).__name__)   # ValueError naming a field
        self._progress = self._resume = _Progress(batches, samples, key)

    # -- report ---------------------------------------------------------------
    def epoch_report(self, gather=False, timeline=False):
        """Figures of the latest epoch (the one in progress, or the last
        finished): a dict, see pyddstore/torch/report.py and docs.  None before
        the first iter().  gather=True adds the per-rank spread (collective
        over the dataset's communicator, else torch.distributed);
        timeline=True the last batches' times (report.plot_timeline draws them)."""
        if self._stats is None:
            return None
        fig = self._stats.figures(timeline)
        return _report.gather(fig, _report.comm_of(self._stores)) if gather else fig

    def _epoch_ended(self, stats):
        target = self._report_to
        if target is None or stats is not self._stats:
            return
        fig = _report.gather(stats.figures(isinstance(target, str)),
                             _report.comm_of(self._stores))
        if fig["rank"] == 0:
            _report.emit(fig, target)

    def __del__(self):
        try:
            if not self._closed:
                for run in self._runs:
                    run.shutdown(join=False)
        except Exception:  # noqa: BLE001
            pass


class _Progress:
    """Batches and samples delivered in the current epoch (counting those
    before a resume); `key` is the DistSampler's (epoch, start) they count
    from, `base_samples` the samples delivered before this iteration."""

    def __init__(self, batches, samples, key):
        self.batches, self.samples, self.base_samples, self.key = batches, samples, samples, key


def _pin_settings(pin_memory):
    """(pin?, device type) as DataLoader decides: only with an accelerator."""
    if not pin_memory:
        return False, None
    acc_mod = getattr(torch, "accelerator", None)
    if acc_mod is not None:
        if not acc_mod.is_available():
            return False, None
        acc = acc_mod.current_accelerator()
        return True, (acc.type if acc is not None else None)
    return (torch.cuda.is_available(), "cuda")  # pragma: no cover - older torch


class _ThreadIter:
    """One epoch of a ThreadDataLoader: set-up here, the batches in
    ext.Batches (ddstore-torch/csrc/loader.cpp)."""

    def __init__(self, loader, t0=None):
        ds, nw = loader.dataset, loader.num_workers
        self._loader = loader    # (the loader lives as long as its iterators)
        self._index_sampler = loader._index_sampler
        # The same draws as DataLoader's _BaseDataLoaderIter.__init__: the
        # sampler iterator first, then the base seed (once per iterator, or
        # once per loader with persistent workers).
        sampler_iter = iter(self._index_sampler)
        if not (loader.persistent_workers and loader._seed_drawn):
            self._base_seed = torch.empty((), dtype=torch.int64).random_(
                generator=loader.generator).item()
            loader._seed_drawn = True
        # state: what the consumer has been given (loader.state_dict())
        skip, loader._skip = loader._skip, 0
        dsamp = loader._dist_sampler()
        pr, loader._resume = loader._resume, None       # a loaded state, else a new epoch
        for _ in range(skip):       # another sampler: skip the batches consumed
            if next(sampler_iter, StopIteration) is StopIteration:
                break
        loader._epochs += 1
        self._stats = loader._stats = _report.EpochStats(
            loader._epochs - 1, ds, nw, nw * (loader.prefetch_factor or 0), t0)
        fast = (loader._auto_collation and loader._default_collate and
                loader._cfg.fast_collate and hasattr(ds, "_collate") and ds._fast_collate_ok())
        pin = _pin_settings(loader.pin_memory)
        # The native pipeline (ext.Pipeline): host batches of the direct
        # collate, read by C++ worker threads that never take the GIL
        pipe, help_ = None, 0
        if fast and nw > 0 and not pin[0] and not loader.reuse_buffers and \
                not isinstance(ds, IterableDataset) and hasattr(ds, "_pipeline"):
            pipe = ds._pipeline()
            if pipe is not None and loader._cfg.loader_help:
                help_ = ds._reader()._handle   # the consumer reads batches nobody started
        fetch = _fetcher(loader, ds, fast, pin)
        slot = loader._slots.take(False) if nw == 0 and loader.reuse_buffers else None
        b = self._b = ext.Batches(
            sampler_iter, self._stats, nw, loader._in_order, float(loader.timeout or 0),
            loader.timeout, loader._auto_collation, pipe, help_,
            None if nw else (lambda index: fetch(index, slot)),
            # GPU batches from worker threads are handed to the consumer's
            # stream with events (no synchronize): only where CUDA/HIP is usable
            nw > 0 and pipe is None and torch.cuda.is_available(),
            0 if pr is None else pr.batches, 0 if pr is None else pr.samples)
        b.key = None if dsamp is None else (dsamp.epoch, dsamp._start)
        b.pool, b.on_end = loader._slots, weakref.WeakMethod(loader._epoch_ended)
        b.owns, b.slots = nw == 0, [slot] if slot is not None else []
        loader._progress = b
        if pipe is not None:   # C++ threads (their thread readers taken here)
            b.start_native(ds, loader._cpus, loader.worker_init_fn)
        for wid in range(nw if pipe is None else 0):   # Python threads: user code
            t = threading.Thread(target=b.serve_worker, name=f"ddstore-loader-{wid}",
                                 args=(wid, fetch, loader._cpus[wid], loader.worker_init_fn),
                                 daemon=True)
            t.start()
            b.threads.append(t)
        b.prime(nw * (loader.prefetch_factor or 0))

    def __next__(self):
        return self._b.__next__()

    @property
    def _num_yielded(self):
        return self._b.num_yielded

    def __iter__(self):
        return self

    def __len__(self):
        return len(self._index_sampler)

    def close(self):
        """End this epoch early, as generator.close() does: later next()
        raises StopIteration.  Waits for the fetches in flight, stops the
        worker threads, drops the prefetched batches and unregisters the
        reuse_buffers sets this epoch used (the loader allocates new ones if
        iterated again; its thread readers are kept).  Idempotent.  Call it
        from the thread that iterates."""
        self._b.close()

    def __del__(self):
        try:
            self._b.shutdown(False)
        except Exception:  # noqa: BLE001
            pass


def _fetcher(loader, ds, fast, pin):
    """fetch(index, slot) -> (batch, collate_s, pin_s), run by a Python
    worker thread (or the calling thread): the user's dataset and
    collate_fn, or the direct collate; collate_s and pin_s where they are
    steps of their own.  (No reference to the iterator: worker threads must
    not keep it alive, so that dropping it stops them.)"""
    collate, auto, reuse = loader.collate_fn, loader._auto_collation, loader.reuse_buffers
    if loader._default_collate and getattr(getattr(ds, "schema", None), "ragged", None):
        collate = ds.collate_fn   # ragged fields: default_collate cannot stack them
    pin, pin_device = pin
    box, perf, pin_memory = [], time.perf_counter, _tud_utils.pin_memory.pin_memory
    iterable = isinstance(ds, IterableDataset)
    if iterable:
        kind = torch.utils.data.dataloader._DatasetKind
        make = (lambda: kind.create_fetcher(kind.Iterable, ds, auto, collate, loader.drop_last))

    def fetch(index, slot):
        bufs = slot.bufs if (slot is not None and reuse) else None
        t = None
        if fast:
            if bufs is None:
                return ds._collate(index, pin_memory=pin), 0.0, 0.0   # all in one
            data = ds._collate(index, out=bufs)
            t = perf()
            data = ext.copy_batch(data)
        elif iterable:
            box[:] = box or [make()]
            data = box[0].fetch(index)
        else:
            if not auto:
                rows = ds[index]
            elif bufs is not None:
                rows = ds.__getitems__(index, out=bufs)
            elif getattr(ds, "__getitems__", None):
                rows = ds.__getitems__(index)
            else:
                rows = [ds[i] for i in index]
            t = perf()
            data = collate(rows)
        t1 = perf()
        if pin:
            data = pin_memory(data, pin_device)
        return data, 0.0 if t is None else t1 - t, (perf() - t1) if pin else 0.0
    return fetch
