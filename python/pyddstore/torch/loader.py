"""ThreadDataLoader: a DataLoader whose workers are threads.

Threads share the process's MPI and GPU context, so they read with any
method (0, 1, 2) and into GPU memory.  The sampler is consumed in the
calling thread exactly as DataLoader does (same random draws, same order);
worker threads fetch, collate and pin; ``num_workers * prefetch_factor``
batches are in flight.  With the default collate_fn and a DistDataset (or
DistDatasetReader / WindowedDataset) the batch tensors are allocated once and
every field is read straight into them (direct collate).
"""

import inspect
import os
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

_DEFAULT_COLLATES = {_tud_utils.collate.default_collate}
try:  # the public alias is the same function; keep both just in case
    _DEFAULT_COLLATES.add(torch.utils.data.default_collate)
except AttributeError:  # pragma: no cover
    pass

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
        if hasattr(d, "_store_datasets") and hasattr(d, "_bind_reader"):
            out.append(d)
            continue
        if hasattr(d, "_store_datasets"):
            todo.extend(d._store_datasets())
            continue
        inner = getattr(d, "dataset", None)
        if inner is not None:
            todo.append(inner)
        for inner in getattr(d, "datasets", None) or ():
            todo.append(inner)
    return out


class _Slot:
    """Per-worker resources, reused across epochs: thread readers, buffers."""

    def __init__(self, wid):
        self.wid = wid
        self.readers = []    # [(dataset, reader)]
        self.bufs = None     # from dataset.alloc(batch_size), reuse_buffers


class _State:
    """What worker threads share with their iterator (not the iterator itself,
    so that dropping the iterator stops them)."""

    def __init__(self):
        self.stop = False
        self.threads = []
        self.slots = []         # the worker slots this epoch took (iterator close())
        self.gpu = False        # record/wait CUDA events around batches
        self.batches = None     # ext.Batches: the epoch's tasks, results and figures
        self.pipe = None        # ext.Pipeline: workers read without the GIL
        self.reader = None      # pipe: the dataset's _reader (called in the worker)

    def shutdown(self, join=False):
        if not self.stop:
            self.stop = True
            if self.batches is not None:
                self.batches.stop()          # wakes the workers; stops the pipeline
            elif self.pipe is not None:
                self.pipe.stop()
        if join:
            for t in self.threads:
                if t is not threading.current_thread():
                    t.join()


class _Config:
    """The settings a ThreadDataLoader follows, read once when it is created
    (a later change of the environment does not apply to it)."""

    def __init__(self, report, workers):
        s = env.read()
        self.fast_collate = s.fast_collate
        self.thread_readers = s.thread_readers
        self.loader_help = s.loader_help
        # a bad value raises here, naming the variable and the value
        self.affinity = (s.affinity_width, s.affinity_offset) if workers > 0 else (0, 0)
        self.local_rank = env.local_rank()
        self.report = env.loader_report(report)   # None, True or a path

    def cpus(self, nworkers):
        """CPU set per worker thread (None: not pinned): worker w of local
        rank L on CPU offset + L * width + w % width."""
        width, offset = self.affinity
        if width <= 0:
            return [None] * nworkers
        base = offset + self.local_rank * width
        return [{base + (wid % width)} for wid in range(nworkers)]


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
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 "
                             "to read in the calling thread")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor needs num_workers > 0")
        if num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        if prefetch_factor is not None and prefetch_factor < 1:
            raise ValueError("prefetch_factor must be >= 1 with worker threads")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        if multiprocessing_context is not None:
            raise ValueError("ThreadDataLoader uses threads: multiprocessing_context does "
                             "not apply")
        # the settings, read once (a bad value raises here, naming it)
        self._cfg = _Config(report, num_workers)
        if isinstance(dataset, IterableDataset) and num_workers > 1:
            raise ValueError("ThreadDataLoader: an IterableDataset can use at most one "
                             "worker thread")
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
        self._slots = []                 # free _Slot objects
        self._all_slots = []
        self._slots_lock = threading.Lock()
        self._runs = []                  # _State of every epoch with threads
        self._seed_drawn = False
        self._closed = False
        self._iter_ref = None            # weakref to the latest iterator
        self._stats = None               # its report.EpochStats
        self._epochs = 0
        self._progress = _Progress(0, 0, None)
        self._skip = 0                   # batches to skip at the next iter() (loaded state)
        self._resume = None              # the loaded _Progress, for the next iter()

    # DataLoader.__iter__ builds processes for num_workers > 0; ours threads.
    def __iter__(self):
        t0 = time.perf_counter()
        if self._closed:
            raise RuntimeError("ThreadDataLoader: iter() after close()")
        # threads of finished / abandoned epochs return their slots (readers,
        # buffers) before this epoch takes them: no new registrations
        for st in list(self._runs):
            if st.stop:
                st.shutdown(join=True)
                self._runs.remove(st)
        it = _ThreadIter(self, t0)
        if it._threads:
            self._runs.append(it._state)
        self._iter_ref = weakref.ref(it)
        return it

    def _get_iterator(self):
        return self.__iter__()

    @property
    def persistent_workers(self):
        return getattr(self, "_persistent", False)

    @persistent_workers.setter
    def persistent_workers(self, v):
        # DataLoader.__init__ assigns it (False, num_workers=0); keep ours
        pass

    def check_worker_number_rationality(self):
        return   # threads: no process-count warning

    # -- worker slots (readers, buffers) ------------------------------------
    def _take_slot(self, wid, readers=True):
        with self._slots_lock:
            for k, slot in enumerate(self._slots):
                if bool(slot.readers) == (readers and bool(self._reader_stores())):
                    slot = self._slots.pop(k)
                    break
            else:
                slot = None
        if slot is not None:
            if self.reuse_buffers and slot.bufs is None:   # released by an iterator's close()
                try:
                    slot.bufs = self.dataset.alloc(self.batch_size)
                except BaseException:
                    self._give_slot(slot)
                    raise
            return slot
        slot = _Slot(wid)
        if readers:
            for d in self._reader_stores():
                slot.readers.append((d, d.ddstore.open_reader()))
        if self.reuse_buffers:
            slot.bufs = self.dataset.alloc(self.batch_size)
        with self._slots_lock:
            self._all_slots.append(slot)
        return slot

    def _reader_stores(self):
        if not self._cfg.thread_readers:
            return []
        return [d for d in self._stores
                if getattr(d, "ddstore", None) is not None
                and _backends.row(getattr(d, "method", 0))["thread_readers"]
                and hasattr(d.ddstore, "open_reader")]

    def _give_slot(self, slot):
        with self._slots_lock:
            self._slots.append(slot)

    def _release_bufs(self, slots):
        """Unregister the reuse_buffers sets of `slots` that are back in the
        pool (an iterator's close(); a slot taken again meanwhile belongs to
        another iterator and keeps its set).  A later epoch allocates anew."""
        with self._slots_lock:
            drop = []
            for slot in slots:
                if slot.bufs is not None and any(slot is x for x in self._slots):
                    drop.append(slot.bufs)
                    slot.bufs = None
        for bufs in drop:
            try:
                self.dataset.release(bufs)
            except Exception:  # noqa: BLE001 - the dataset was freed: nothing left
                pass

    def close(self):
        """Stop every iterator, wait for fetches in flight, close thread readers
        and unregister reuse_buffers buffers.  Idempotent."""
        for st in self._runs:
            st.shutdown(join=True)
        self._runs = []
        with self._slots_lock:
            slots, self._all_slots, self._slots = self._all_slots, [], []
        for slot in slots:
            if slot.bufs is not None:
                try:
                    self.dataset.release(slot.bufs)
                except Exception:  # noqa: BLE001 - store already freed
                    pass
                slot.bufs = None
            for _, r in slot.readers:
                try:
                    r.close()
                except Exception:  # noqa: BLE001
                    pass
            slot.readers = []
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

    def _live_iter(self):
        it = self._iter_ref() if self._iter_ref is not None else None
        return it if it is not None and not it._ended else None

    def state_dict(self):
        """Where the consumer is: a plain picklable dict.  Counts only the
        batches delivered by next() (prefetched ones are fetched again after
        a resume).  With a DistSampler it holds the sampler's global position
        (resumable at any world size); with another sampler the number of
        batches to skip (the same order is then needed: a sampler whose order
        depends only on its epoch, e.g. DistributedSampler)."""
        if isinstance(self.dataset, IterableDataset):
            raise ValueError("ThreadDataLoader.state_dict needs a map-style dataset "
                             "(an IterableDataset keeps its own position)")
        if not self._in_order and self.num_workers > 0:
            raise ValueError("ThreadDataLoader.state_dict needs in_order=True with worker "
                             "threads (batches delivered out of order are not a prefix)")
        pr = self._progress
        ds = self._dist_sampler()
        sst = None
        batches, samples = pr.batches, pr.samples
        if ds is not None:
            if pr.key != (ds.epoch, ds._start):     # set_epoch() since: a new epoch
                batches = samples = 0
                sst = ds.state_dict(consumed=0)
            else:
                sst = ds.state_dict(consumed=samples - pr.base_samples)
        return ext.loader_state(batches, samples, sst)

    def load_state_dict(self, state):
        """Resume from `state` at the next iter(loader).  ValueError naming the
        field for a state that does not fit this loader; RuntimeError while
        an iterator of this loader is running."""
        if self._live_iter() is not None:
            raise RuntimeError("ThreadDataLoader.load_state_dict while an epoch is being "
                               "iterated: finish it or close() its iterator first")
        batches, samples, sst = ext.loader_state_check(state)   # ValueError naming a field
        ds = self._dist_sampler()
        if (sst is None) != (ds is None):
            have = type(ds or self.sampler).__name__
            raise ValueError(f"ThreadDataLoader state: field 'sampler' is "
                             f"{'None' if sst is None else 'a DistSampler state'}, but this "
                             f"loader's sampler is {have}")
        if ds is not None:
            ds.load_state_dict(sst)
            skip = 0
        else:
            skip = batches
        self._skip = skip
        self._progress = self._resume = _Progress(
            batches, samples, None if ds is None else (ds.epoch, ds._start))

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
        return _report.gather(fig, self._report_comm()) if gather else fig

    def _report_comm(self):
        return _report.comm_of(self._stores)

    def _epoch_ended(self, stats):
        target = self._cfg.report
        if target is None or stats is not self._stats:
            return
        fig = _report.gather(stats.figures(isinstance(target, str)), self._report_comm())
        if fig["rank"] == 0:
            _report.emit(fig, target)

    def __del__(self):
        try:
            if not self._closed:
                for st in self._runs:
                    st.shutdown(join=False)
        except Exception:  # noqa: BLE001
            pass


class _Progress:
    """Batches and samples delivered in the current epoch (counting those
    before a resume); `key` is the DistSampler's (epoch, start) they count
    from, `base_samples` the samples delivered before this iteration."""

    def __init__(self, batches, samples, key):
        self.batches = batches
        self.samples = samples
        self.base_samples = samples
        self.key = key


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


def _copy_batch(data):
    if isinstance(data, torch.Tensor):
        return data.clone()
    if isinstance(data, dict):
        return {k: _copy_batch(v) for k, v in data.items()}
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(_copy_batch(v) for v in data))
    if isinstance(data, (list, tuple)):
        return type(data)(_copy_batch(v) for v in data)
    if hasattr(data, "copy"):
        return data.copy()
    return data


class _ThreadIter:
    """One epoch of a ThreadDataLoader: set-up and threads here, the batches
    in ext.Batches (ddstore-torch/csrc/loader.cpp)."""

    def __init__(self, loader, t0=None):
        cfg = loader._cfg
        cpus = cfg.cpus(loader.num_workers)
        self._loader = loader
        ds = self._dataset = loader.dataset
        self._auto_collation = loader._auto_collation
        self._index_sampler = loader._index_sampler
        self._collate_fn = loader.collate_fn
        if loader._default_collate and getattr(getattr(ds, "schema", None), "ragged", None):
            # ragged fields: default_collate cannot stack them; the dataset's
            # collate_fn packs/pads them (the fast path does the same reading)
            self._collate_fn = ds.collate_fn
        self._drop_last = loader.drop_last
        nw = self._num_workers = loader.num_workers
        self._pin, self._pin_device = _pin_settings(loader.pin_memory)
        # The same draws as DataLoader's _BaseDataLoaderIter.__init__: the
        # sampler iterator first, then the base seed (once per iterator, or
        # once per loader with persistent workers).
        self._sampler_iter = iter(self._index_sampler)
        if not (loader.persistent_workers and loader._seed_drawn):
            self._base_seed = torch.empty((), dtype=torch.int64).random_(
                generator=loader.generator).item()
            loader._seed_drawn = True
        # state: what the consumer has been given (loader.state_dict())
        skip, loader._skip = loader._skip, 0
        dsamp = loader._dist_sampler()
        pr, loader._resume = loader._resume, None       # a loaded state, else a new epoch
        for _ in range(skip):       # another sampler: skip the batches consumed
            try:
                next(self._sampler_iter)
            except StopIteration:
                break
        loader._epochs += 1
        self._stats = loader._stats = _report.EpochStats(
            loader._epochs - 1, ds, nw, nw * (loader.prefetch_factor or 0), t0)
        self._fast = (self._auto_collation and loader._default_collate and
                      cfg.fast_collate and hasattr(ds, "_collate") and ds._fast_collate_ok())
        self._reuse = loader.reuse_buffers
        self._is_iterable = isinstance(ds, IterableDataset)
        st = self._state = _State()
        # The native pipeline (ext.Pipeline): host batches of the direct
        # collate, read by the worker threads without the GIL
        help_ = 0
        if self._fast and nw > 0 and not self._pin and not self._reuse \
                and not self._is_iterable:
            mk = getattr(ds, "_pipeline", None)
            st.pipe = mk() if mk is not None else None
            if st.pipe is not None:
                st.reader = ds._reader
                if cfg.loader_help:   # the consumer reads batches nobody has started
                    help_ = ds._reader()._handle
        # GPU batches from worker threads are handed to the consumer's stream
        # with events (no synchronize): only where CUDA/HIP is usable
        st.gpu = nw > 0 and torch.cuda.is_available()
        self._threads = threads = []
        self._slot = None
        self._closed = False
        fetch = self._make_fetch()
        main_fetch = None
        if nw == 0:
            if self._reuse:
                self._slot = slot = loader._take_slot(0, readers=False)
                st.slots.append(slot)
            main_fetch = (lambda index, slot=self._slot: fetch(index, slot))
        b = self._b = st.batches = ext.Batches(
            self._sampler_iter, self._stats, nw, loader._in_order,
            float(loader.timeout or 0), loader.timeout, self._auto_collation, st.pipe,
            help_, main_fetch, (lambda: any(t.is_alive() for t in threads)) if nw else None,
            _wait_events, 0 if pr is None else pr.batches, 0 if pr is None else pr.samples)
        b.key = None if dsamp is None else (dsamp.epoch, dsamp._start)
        loader._progress = b
        for wid in range(nw):
            t = threading.Thread(target=_worker_loop, name=f"ddstore-loader-{wid}",
                                 args=(weakref.ref(loader), st, wid, fetch, cpus[wid]),
                                 daemon=True)
            t.start()
            threads.append(t)
        st.threads = threads
        b.prime(nw * (loader.prefetch_factor or 0))

    # -- fetching -----------------------------------------------------------
    def _make_fetch(self):
        """fetch(index, slot) -> (batch, collate_s, pin_s), run by a worker (or
        the calling thread): the user's dataset and collate_fn, the direct
        collate otherwise; collate_s and pin_s where they are steps of their
        own."""
        ds = self._dataset
        collate = self._collate_fn
        pin = self._pin
        pin_device = self._pin_device
        fast = self._fast
        reuse = self._reuse
        auto = self._auto_collation
        is_iterable = self._is_iterable
        drop_last = self._drop_last
        fetcher_box = {}
        perf = time.perf_counter
        pin_memory = _tud_utils.pin_memory.pin_memory
        # (no reference to self here: worker threads must not keep the
        # iterator alive, so that dropping it stops them)

        def fetch(index, slot):
            bufs = slot.bufs if (slot is not None and reuse) else None
            if fast:
                if bufs is None:
                    return ds._collate(index, pin_memory=pin), 0.0, 0.0   # all in one
                data = ds._collate(index, out=bufs)
                t = perf()
                data = _copy_batch(data)
                t1 = perf()
                if pin:
                    data = pin_memory(data, pin_device)
                return data, t1 - t, (perf() - t1) if pin else 0.0
            if is_iterable:
                f = fetcher_box.get("f")
                if f is None:
                    kind = torch.utils.data.dataloader._DatasetKind
                    f = fetcher_box["f"] = kind.create_fetcher(kind.Iterable, ds, auto,
                                                               collate, drop_last)
                data, t = f.fetch(index), None
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

    def __next__(self):
        try:
            return self._b.next()
        except StopIteration:
            self._shutdown(join=self._num_workers > 0)   # idle threads: returns at once
            if self._b.report_due():
                self._loader._epoch_ended(self._stats)
            raise
        except BaseException:
            if self._b.ended:                # a batch's error: the epoch ends
                self._shutdown(join=False)
            raise

    @property
    def _ended(self):
        return self._b.ended

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
        if self._closed:
            return
        self._closed = True
        st = self._state
        self._shutdown(join=True)
        self._b.clear()                       # drops the prefetched batches, the sampler
        self._sampler_iter = iter(())
        self._loader._release_bufs(st.slots)
        st.slots = []

    def _shutdown(self, join=False):
        self._state.shutdown(join)
        if getattr(self, "_slot", None) is not None:
            self._loader._give_slot(self._slot)
            self._slot = None

    def __del__(self):
        try:
            self._shutdown(join=False)
        except Exception:  # noqa: BLE001
            pass


def _gpu_tensors(data):
    """The CUDA/HIP tensors of a batch (dicts, lists, tuples, namedtuples)."""
    if isinstance(data, torch.Tensor):
        if data.is_cuda:
            yield data
    elif isinstance(data, dict):
        for v in data.values():
            yield from _gpu_tensors(v)
    elif isinstance(data, (list, tuple)):
        for v in data:
            yield from _gpu_tensors(v)


def _record_events(data):
    """In the worker: one event per device after the reads and the collate
    queued on this thread's current stream.  None for host batches."""
    devices = {t.device for t in _gpu_tensors(data)}
    if not devices:
        return None
    events = []
    for d in devices:
        ev = torch.cuda.Event()
        ev.record(torch.cuda.current_stream(d))
        events.append((d, ev))
    return events


def _wait_events(data, events):
    """In the consumer: its current stream waits for the worker's work (on
    the device, the host does not wait), and the caching allocator learns
    that the batch is used on that stream (so its memory is not reused by
    the worker's stream while the consumer's kernels still read it)."""
    streams = {}
    for d, ev in events:
        s = torch.cuda.current_stream(d)
        s.wait_event(ev)
        streams[d] = s
    for t in _gpu_tensors(data):
        s = streams.get(t.device)
        if s is not None:
            t.record_stream(s)


def _worker_loop(loader_ref, st, wid, fetch, cpus):
    loader = loader_ref()
    if loader is None:
        return
    if cpus is not None:
        try:
            os.sched_setaffinity(0, cpus)   # 0 = this thread on Linux
        except (AttributeError, OSError):
            pass
    try:
        slot = loader._take_slot(wid)
    except BaseException as e:  # noqa: BLE001 - reported with the first batch
        slot = None
        err = e
    else:
        err = None
        st.slots.append(slot)
    b = st.batches
    try:
        for d, r in (slot.readers if slot is not None else ()):
            d._bind_reader(r)
        if loader.worker_init_fn is not None and err is None:
            try:
                loader.worker_init_fn(wid)
            except BaseException as e:  # noqa: BLE001
                err = e
        del loader
        if st.pipe is not None:
            if err is not None:
                b.fail(err)
            else:
                st.pipe.run(st.reader(), wid)     # until the epoch ends (pipe.stop())
            return
        perf = time.perf_counter
        while True:
            task = b.get_task()                   # None: the epoch ended
            if task is None:
                break
            seq, index = task
            if err is not None:
                b.put(seq, 0, err, None, -1.0, -1.0, 0.0, 0.0, wid)
                continue
            events = None
            c = p = 0.0
            t = perf()
            try:
                (data, c, p), kind = fetch(index, slot), 1
                if st.gpu:
                    events = _record_events(data)
            except StopIteration:
                data, kind = None, 2
            except BaseException as e:  # noqa: BLE001 - re-raised by the iterator
                data, kind = e, 0
            b.put(seq, kind, data, events, t, perf(), c, p, wid)
    finally:
        if slot is not None:
            for d, _ in slot.readers:
                d._bind_reader(None)
            lo = loader_ref()
            if lo is not None:
                lo._give_slot(slot)
