"""DistDataset, DistDatasetReader, WindowedDataset and row_of.

A DistDataset stores each field of a map-style dataset's samples as one
ddstore variable (one row per sample), or with pack_fields=True every fixed
field of a sample in one row of one variable (packing.py): each rank loads
only its share of the source, in one pass, and every rank reads every sample
with one-sided reads.
"""

import json
import operator
import os
import sys
import threading
import time
import weakref

import numpy as np
import torch

import pyddstore
from pyddstore import _backends

from . import env
from . import comm as _comm
from . import packing as _pk
from . import ragged as _rg
from ._ext import as_index_tensor, ext, stream_of
from .schema import RAGGED_KINDS, Schema, _is_pyg

__all__ = ["DistDataset", "DistDatasetReader", "WindowedDataset", "row_of",
           "sampler_kwargs"]

_META_FORMAT = "pyddstore.torch.meta"
_META_VERSION = 3          # 2: run-scoped (exchange_ns, run_id, generation);
                           # 3: ragged fields ("axis" in a field's description;
                           #    written only when the dataset has ragged fields)
_META_VERSION_FIXED = 2
_META_VERSION_PACKED = 4   # 4: fixed fields packed into one row ("packed", "offset")
_META_MAX_BYTES = 16 << 20
_RECORD_MAX_BYTES = 1 << 30


def _device(d):
    """None for host memory, else a torch.device (cpu → None)."""
    if d is None:
        return None
    d = torch.device(d)
    if d.type == "cpu":
        return None
    if d.type == "cuda" and d.index is None:
        d = torch.device("cuda", torch.cuda.current_device())
    return d


def _share(n, rank, size):
    """[lo, hi) of a balanced split of n rows over size ranks."""
    base, extra = divmod(n, size)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (1 if rank < extra else 0)


class _LogProgress:
    """Loading progress for batch jobs (stderr not a terminal): a line every
    `interval` seconds with percent, rate and ETA, and one when done."""

    def __init__(self, total, name, interval=5.0, out=None):
        self.total, self.name, self.interval = total, name, interval
        self.out = out if out is not None else sys.stderr
        self.n = 0
        self.t0 = self._last = time.monotonic()

    def _line(self, done=False):
        el = max(time.monotonic() - self.t0, 1e-9)
        rate = self.n / el
        if done:
            msg = f"loaded {self.n} samples in {el:.1f} s ({rate:.0f} samples/s)"
        else:
            eta = (self.total - self.n) / rate if rate > 0 else float("inf")
            msg = (f"{100.0 * self.n / self.total:.0f}% ({self.n}/{self.total} samples, "
                   f"{rate:.0f} samples/s, ETA {eta:.0f} s)")
        try:
            self.out.write(f"ddstore: loading '{self.name}' on rank 0: {msg}\n")
            self.out.flush()
        except (OSError, ValueError):
            pass

    def update(self, k):
        self.n = min(self.total, self.n + k)
        now = time.monotonic()
        if now - self._last >= self.interval:
            self._last = now
            self._line()

    def refresh(self):
        pass

    def close(self):
        if self.n >= self.total:
            self._line(done=True)


def _progress(total, name, rank):
    """Rank 0's loading progress (DDSTORE_PROGRESS, on by default): a tqdm bar
    on a terminal, else a line on stderr every few seconds."""
    if not (rank == 0 and total > 0 and env.progress()):
        return None
    try:
        tty = sys.stderr.isatty()
    except (AttributeError, ValueError):
        tty = False
    if tty:
        try:
            from tqdm import tqdm
        except ImportError:  # pragma: no cover - a declared dependency of [torch]
            tty = False
        else:
            return tqdm(total=total, desc=f"ddstore {name}", unit="sample", leave=False,
                        dynamic_ncols=True, mininterval=0.5)
    return _LogProgress(total, name)


class _ForkedProfile:
    """Read counters of forked DataLoader workers, summed where the parent
    sees them: a shared anonymous mapping made before the fork (one row of
    counters per variable) and a lock; after each read a worker adds what its
    reader counted since its last read.  get_profile() in the parent adds
    the rows to the store's own counters."""

    def __init__(self, store, variables):
        self._vars = {v: i for i, v in enumerate(variables)}
        self._keys = None
        self._mem = None
        self._lock = None
        try:
            sample = store.get_profile(variables[0]) if variables else {}
        except Exception:  # noqa: BLE001 - no counters, nothing to share
            return
        self._keys = [k for k, v in sample.items() if isinstance(v, (int, float))
                      and not isinstance(v, bool)]
        if not self._keys:
            return
        import mmap
        import multiprocessing
        self._mem = mmap.mmap(-1, 8 * len(variables) * len(self._keys))   # MAP_SHARED
        self._lock = multiprocessing.get_context("fork").Lock()
        self._rows = np.frombuffer(self._mem, dtype=np.float64).reshape(
            len(variables), len(self._keys))
        self._last = {}

    def _vector(self, prof):
        return np.array([float(prof.get(k, 0)) for k in self._keys])

    def start(self, reader):
        """In a worker: what its new reader counts from now on is the worker's."""
        if self._mem is not None:
            self._last = {v: self._vector(reader.get_profile(v)) for v in self._vars}

    def flush(self, reader, variables):
        if self._mem is None:
            return
        with self._lock:
            for v in variables:
                cur = self._vector(reader.get_profile(v))
                self._rows[self._vars[v]] += cur - self._last[v]
                self._last[v] = cur

    def add_to(self, var, prof):
        if self._mem is None or var not in self._vars:
            return prof
        with self._lock:
            row = self._rows[self._vars[var]].copy()
        out = dict(prof)
        for k, x in zip(self._keys, row):
            if x:
                out[k] = type(prof.get(k, 0))(out.get(k, 0) + x)
        return out


class _Stored(torch.utils.data.Dataset):
    """Reading side shared by DistDataset and DistDatasetReader.

    Subclasses set: ddstore, name, schema (the fields read back), total,
    device, decode, method, _pack (the RowLayout of packed fixed fields, or
    None)."""

    def _init_reading(self):
        self._pid = os.getpid()
        self._tls = threading.local()
        self._fork = None            # (pid, reader) in a forked worker
        self._forked = _ForkedProfile(self.ddstore, self._vars_of(self.schema.fields))
        self._allocs = {}            # id(bufs) -> list of registered tensors
        self._rowbufs = {}           # id(bufs) -> the packed row buffer of alloc()
        self._freed = False
        self._guess = {}             # ragged var -> element rows per sample seen (max)
        self._update_specs()

    @staticmethod
    def _vars_of(fields):
        """The store variables of `fields` (packed fields share one), in order."""
        return list(dict.fromkeys(f.var for f in fields))

    def _update_specs(self):
        dev = self.device
        fixed = [f for f in self.schema.fields if f.axis is None]
        # packed: the spec names only name the field in errors
        self._specs = [(f"{f.var}[{f.key!r}]" if self._pack else f.var, f.row_shape,
                        f.dtype, f.kind == "tensor" and dev is not None) for f in fixed]
        self._packed_spec = self._pack.spec(fixed) if self._pack and fixed else None
        # the host direct collate of fixed fields, its specs parsed once (C++);
        # None with ragged fields (their batches are packed / padded in Python)
        st = self.schema
        self._collator = None if len(self._specs) != len(st.fields) else ext.Collator(
            self._specs, self.total, f"{type(self).__name__} '{self.name}'", st.structure,
            st.ntype if st.structure == "namedtuple" else
            tuple(st.keys) if st.structure == "dict" else None, self._packed_spec)

    @property
    def pack_fields(self):
        """True when the fixed fields of a sample are packed into one row of
        one store variable (DistDataset(pack_fields=True)): a batch is one
        read of that variable."""
        return self._pack is not None

    # -- which store object reads (thread readers, forked workers) ----------
    def _reader(self):
        if os.getpid() != self._pid:
            return self._forked_reader()
        r = getattr(self._tls, "reader", None)
        return self.ddstore if r is None else r

    def _bind_reader(self, reader):
        """Reads from the calling thread go through `reader` (None: the store)."""
        self._tls.reader = reader

    def _forked_reader(self):
        pid = os.getpid()
        if self._fork is not None and self._fork[0] == pid:
            return self._fork[1]
        # method 0: no MPI after fork; the worker reads the shards of this node's
        # ranks from the shared memory it inherited (no libfabric, so
        # DDSTORE_FORK_WORKERS is not needed); a shard on another node is an
        # error at the first read naming ThreadDataLoader and method 1.
        if _backends.row(self.method)["fork_needs_env"] and not env.fork_workers():
            raise RuntimeError(
                f"DistDataset '{self.name}': read from a forked DataLoader worker; set "
                "DDSTORE_FORK_WORKERS=1 before libfabric starts (job script, or "
                "os.environ before importing pyddstore) so that each worker opens its own "
                "reader")
        reader = self.ddstore.fork_reader()
        self._fork = (pid, reader)
        self._forked.start(reader)
        return reader

    def _read_device(self):
        return None if os.getpid() != self._pid else self.device

    def _not_forked(self, what):
        """Raise when called in a process forked after creation: free() there
        would hang the other ranks (and then the parent), and remove files the
        parent still owns."""
        pid = os.getpid()
        if pid != self._pid:
            raise pyddstore.DDStoreError(
                f"{type(self).__name__} '{self.name}': {what}() in a forked child process "
                f"(pid {pid}) of the process that created it (pid {self._pid}): releasing "
                "the store is the creating process's (collective over its ranks); a forked "
                "process (a DataLoader worker) may only read")

    # -- size and schema ----------------------------------------------------
    def __len__(self):
        return self.total

    @property
    def shapes(self):
        """{key: per-sample shape of the field, a tuple of ints} (keys: dict
        keys, tuple/list positions, or 0)."""
        return {f.key: tuple(int(d) for d in f.shape) for f in self.schema.fields}

    @property
    def dtypes(self):
        """{key: dtype name}, strings as the original: 'float32', 'int64',
        'bfloat16', ... (the stored element type; Python int / float / bool
        fields are 'int64' / 'float64' / 'bool'; records 'void<bits>')."""
        return {f.key: f.dtype_name() for f in self.schema.fields}

    @property
    def fields(self):
        """The keys of the stored fields, in order."""
        return list(self.schema.keys)

    @property
    def ragged_fields(self):
        """{key: varying axis} of the ragged fields ({} when every field is
        fixed)."""
        return {f.key: f.axis for f in self.schema.fields if f.axis is not None}

    def sizes(self, field=None, indices=None):
        """The sizes of samples `indices` (default: all) along ragged field
        `field`'s varying axis (default: the dataset's only ragged field), a
        numpy int64 array.  Reads the store's index entries only, never
        payload."""
        f = self._ragged_field(field, "sizes")
        idx = self._indices(range(self.total) if indices is None else indices)
        return np.asarray(self._reader().sizes(f.var, idx.numpy()), dtype=np.int64)

    def _ragged_field(self, field, who):
        rg = self.schema.ragged
        if field is None:
            if len(rg) != 1:
                raise ValueError(f"{type(self).__name__} '{self.name}': {who}() needs field= "
                                 f"(ragged fields: {[f.key for f in rg]!r})")
            return rg[0]
        f = self.schema.field(field)
        if f.axis is None:
            raise ValueError(f"{type(self).__name__} '{self.name}': {who}(): field "
                             f"{field!r} is fixed (shape {f.shape}), not ragged (ragged "
                             f"fields: {[g.key for g in rg]!r})")
        return f

    @property
    def ragged_batch(self):
        """How batches hold ragged fields: "packed" (Packed) or "padded"
        (Padded)."""
        return self._ragged_batch

    def collate_fn(self, samples):
        """The collate_fn for torch's DataLoader over a dataset with ragged
        fields: ragged fields packed or padded (ragged_batch), the others
        stacked as default_collate does.  Samples straight from
        __getitems__ are batched from the reads they came from (no
        per-sample work)."""
        raw = getattr(samples, "raw", None)
        if raw is not None:
            fields, ts = raw
            return self.schema.build_batch(self._batch_values(fields, ts))
        return _rg.pack_samples(self.schema, samples, self._ragged_batch)

    def _batch_values(self, fields, ts):
        mk = _rg.batch_of(self._ragged_batch)
        return [f.batch_value(t) if f.axis is None else mk(f, *t)
                for f, t in zip(fields, ts)]

    # -- reads --------------------------------------------------------------
    def _index(self, i):
        i = operator.index(i)
        if not -self.total <= i < self.total:
            raise IndexError(f"{type(self).__name__} '{self.name}': index {i} out of range "
                             f"[-{self.total}, {self.total}) (negative indices count from "
                             "the end)")
        return i + self.total if i < 0 else i

    def _indices(self, indices):
        return ext.seq_indices(indices, self.total, f"{type(self).__name__} '{self.name}'")

    def _fresh(self, fields, n, device):
        return [torch.empty((n,) + f.row_shape, dtype=f.torch_dtype,
                            device=device if (device is not None and f.kind == "tensor") else "cpu")
                for f in fields]

    def _read(self, fields, idx, out=None):
        """Batch tensors (len(idx), *row_shape) of `fields` for rows idx; a
        ragged field's (values, lengths, offsets, batch) of a packed read."""
        if any(f.axis is not None for f in fields):
            if out is not None:
                bad = [f.key for f in fields if f.axis is not None]
                raise ValueError(f"out=: buffers (alloc()) hold fixed fields only; "
                                 f"{bad!r} {'is' if len(bad) == 1 else 'are'} ragged (read "
                                 "them without out=, or select fixed fields)")
            fixed = [f for f in fields if f.axis is None]
            got = iter(self._read(fixed, idx) if fixed else ())
            return [next(got) if f.axis is None else self._read_ragged(f, idx)
                    for f in fields]
        dev = self._read_device()
        n = int(idx.numel())
        if out is None:
            outs = self._fresh(fields, n, dev)
        else:
            outs = []
            for f in fields:
                try:
                    b = out[f.key]
                except KeyError:
                    raise ValueError(f"out=: no buffer for field {f.key!r} (alloc() them "
                                     "with the same fields)") from None
                if b.shape[0] < n:
                    raise ValueError(f"out=: buffer for field {f.key!r} has {b.shape[0]} "
                                     f"rows, {n} are read")
                outs.append(b[:n] if b.shape[0] != n else b)
        reader = self._reader()
        stream = stream_of(dev) if dev is not None else 0
        if self._pack is not None:     # one read of the packed rows, scattered in C++
            ext.read_packed(reader, self._pack.spec(fields), outs, idx, stream,
                            None if out is None else self._rowbufs.get(id(out)))
        else:
            ext.read_fields(reader, [f.var for f in fields], outs, idx, stream)
        if self._fork is not None and reader is self._fork[1]:
            self._forked.flush(reader, self._vars_of(fields))
        return outs

    def _read_ragged(self, f, idx, device=None, pin_memory=False):
        """(values (total, *row_shape), lengths, offsets, batch): one packed
        read of ragged field f (a guess of the total from the largest
        element rows per sample read so far: one index read when it holds)."""
        dev = self._read_device() if device is None else device
        n = int(idx.numel())
        ratio = self._guess.get(f.var)
        guess = None if ratio is None else int(ratio * n * 1.25) + 16
        reader = self._reader()
        res = _rg.read_packed(reader, f, idx,
                              dev if (dev is not None and f.kind == "tensor") else None,
                              pin_memory, stream_of(dev) if dev is not None else 0, guess)
        if n:
            r = int(res[0].shape[0]) / n
            if ratio is None or r > ratio:
                self._guess[f.var] = r
        if self._fork is not None and reader is self._fork[1]:
            self._forked.flush(reader, [f.var])
        return res

    @staticmethod
    def _single(f, t):
        return f.single(t) if f.axis is None else _rg.sample_value(f, t[0])

    def __getitem__(self, i):
        i = self._index(i)
        fields = self.schema.fields
        ts = self._read(fields, torch.tensor([i], dtype=torch.int64))
        sample = self.schema.build([self._single(f, t) for f, t in zip(fields, ts)])
        if self.decode is not None:
            sample = self.decode(sample, i)
        return sample

    def __getitems__(self, indices, out=None):
        """Samples for `indices` (a list, as DataLoader's fetcher calls it): one
        batched read per field (DDSTORE_BATCH_GET=0: one read per sample).  With
        out= (from alloc()) the samples are views into those buffers."""
        if not env.batch_get():
            return [self[i] for i in indices]
        idx = self._indices(indices)
        fields = self.schema.fields
        ts = self._read(fields, idx, out)
        samples = self.schema.build_many([
            f.split(t) if f.axis is None else _rg.split_values(f, t[0], t[1])
            for f, t in zip(fields, ts)])
        if self.decode is not None:
            dec = self.decode
            samples = [dec(s, int(i)) for s, i in zip(samples, idx.tolist())]
        elif self.schema.ragged:
            samples = _rg.RaggedSamples(samples)
            samples.raw = (fields, ts)
        return samples

    def read_rows(self, rows, fields=None, out=None):
        """Stored rows (any order, repeats allowed) as {key: (len(rows), *shape)}:
        tensors (records: numpy structured arrays).  Skips decode.  With out=
        (from alloc()) the values are views into those buffers."""
        sel = self.schema.select(fields).fields if fields is not None else self.schema.fields
        idx = as_index_tensor(rows)
        ts = self._read(sel, idx, out)
        return dict(zip([f.key for f in sel], self._batch_values(sel, ts)))

    def alloc(self, n, fields=None):
        """Per-field buffers for n rows, registered with the store once: pass as
        out= to read_rows() / __getitems__() to skip registration per read.
        Returns {key: tensor}; release(bufs) (or free()) unregisters."""
        n = operator.index(n)
        if n < 1:
            raise ValueError(f"alloc: n must be >= 1, got {n}")
        if self._freed:
            raise pyddstore.DDStoreError(f"{type(self).__name__} '{self.name}': alloc() "
                                         "after free()")
        sel = self.schema.select(fields).fields if fields is not None else self.schema.fields
        bad = [f.key for f in sel if f.axis is not None]
        if bad:
            raise ValueError(f"{type(self).__name__} '{self.name}': alloc(): {bad!r} "
                             f"{'is' if len(bad) == 1 else 'are'} ragged (sizes vary per "
                             "batch): alloc() buffers hold fixed fields only (fields=; "
                             "ThreadDataLoader: reuse_buffers=False)")
        dev = self._read_device()
        ts = self._fresh(sel, n, dev)
        reg = ts
        rowbuf = None
        if self._pack is not None:
            # the reads land in one row buffer (registered), then are scattered
            on_dev = dev is not None and any(f.kind == "tensor" for f in sel)
            rowbuf = torch.empty((n, self._pack.row_bytes), dtype=torch.uint8,
                                 device=dev if on_dev else "cpu")
            reg = [rowbuf]
        done = []
        try:
            for t in reg:
                ext.register_recv(self.ddstore, t, stream_of(t.device) if t.is_cuda else 0)
                done.append(t)
        except BaseException:
            for t in done:
                try:
                    ext.unregister_recv(self.ddstore, t)
                except Exception:  # noqa: BLE001
                    pass
            raise
        bufs = {f.key: t for f, t in zip(sel, ts)}
        self._allocs[id(bufs)] = reg
        if rowbuf is not None:
            self._rowbufs[id(bufs)] = rowbuf
        return bufs

    def close(self):
        """free() under the name loaders and files use: collective for method
        0, idempotent; release() of alloc() buffers afterwards is a
        ValueError."""
        self.free()

    def release(self, bufs):
        """Unregister buffers from alloc().  ValueError for buffers that are
        not registered (released already, as the original says, or not from
        this dataset's alloc()) and after free() (which released them all)."""
        if self._freed:
            raise ValueError(f"{type(self).__name__} '{self.name}': release() after "
                             "free()/close(): it already unregistered every alloc() buffer")
        ts = self._allocs.pop(id(bufs), None)
        self._rowbufs.pop(id(bufs), None)
        if ts is None:
            raise ValueError(f"{type(self).__name__} '{self.name}': release(): these "
                             "buffers are not registered (released already, or not from "
                             "this dataset's alloc())")
        err = None
        for t in ts:
            try:
                ext.unregister_recv(self.ddstore, t)
            except Exception as e:  # noqa: BLE001 - keep unregistering the rest
                err = err or e
        if err is not None and not isinstance(err, pyddstore.DDStoreError):
            raise err

    def get_profile(self, field=None):
        """Read counters of one field (key), or summed over every field (None).
        Sums over the store, the threads' readers and the reads of forked
        DataLoader workers (each worker adds its counters after every read).
        With pack_fields the packed fields share one variable: a packed
        field's counters are those of every packed field (one read serves
        them all), and the sum counts them once.  "calls" counts planned
        reads (one per batch and variable), "reads" the remote reads they
        posted."""
        fields = [self.schema.field(field)] if field is not None else self.schema.fields
        total = {}
        for var in self._vars_of(fields):
            prof = (self._fork[1] if self._fork is not None and self._fork[0] == os.getpid()
                    else self.ddstore).get_profile(var)
            if os.getpid() == self._pid:
                prof = self._forked.add_to(var, prof)
            for k, v in prof.items():
                if isinstance(v, (int, float)):
                    total[k] = total.get(k, 0) + v
        return total

    # -- direct collate (ThreadDataLoader) ----------------------------------
    def _fast_collate_ok(self):
        return self.decode is None and not self.schema.has_records

    def _pipeline(self):
        """ThreadDataLoader's native prefetch of host batches (None: not for
        this dataset: a device, a forked process, ragged fields)."""
        if self.device is not None or os.getpid() != self._pid or self._collator is None:
            return None
        return ext.Pipeline(self._collator, self.ddstore)

    def _collate(self, indices, pin_memory=False, out=None):
        """default_collate(self.__getitems__(indices)), read straight into the
        batch tensors: one get_batch per field (pack_fields: one for the
        packed fields)."""
        if out is None and not pin_memory and self.device is None and \
                self._collator is not None:
            return self._collator(self._reader(), indices)    # the hot path, in C++
        idx = self._indices(indices)
        if out is None:
            dev = self._read_device()
            specs = self._specs if dev is self.device else \
                [(s[0], s[1], s[2], False) for s in self._specs]
            ts = ext.collate(self._reader(), specs, idx,
                             None if dev is None else str(dev), bool(pin_memory),
                             stream_of(dev) if dev is not None else 0,
                             self._packed_spec) if specs else []
            if self.schema.ragged:
                fixed = iter(ts)
                mk = _rg.batch_of(self._ragged_batch)
                ts = [next(fixed) if f.axis is None else
                      mk(f, *self._read_ragged(f, idx, dev, pin_memory))
                      for f in self.schema.fields]
        else:
            ts = self._batch_values(self.schema.fields, self._read(self.schema.fields, idx, out))
        return self.schema.build_batch(ts)

    def _store_datasets(self):
        return [self]

    def _release_all(self):
        self._rowbufs.clear()
        for key in list(self._allocs):
            ts = self._allocs.pop(key)
            for t in ts:
                try:
                    ext.unregister_recv(self.ddstore, t)
                except Exception:  # noqa: BLE001
                    pass

    def __reduce__(self):
        raise TypeError(
            f"{type(self).__name__} '{self.name}' cannot be pickled: its data lives in the "
            "job's store.  DataLoader workers must be forked (the default on Linux; methods "
            "1/2: set DDSTORE_FORK_WORKERS=1; method 0: every rank on one node) - "
            "spawn/forkserver are not supported; or use ThreadDataLoader")

    def __repr__(self):
        return (f"{type(self).__name__}('{self.name}', {self.total} samples, "
                f"fields {self.schema.fields}, method {self.method})")


class DistDataset(_Stored):
    """A map-style dataset whose samples live in the aggregate memory of the job.

    DistDataset(source, name, comm=None, ddstore_width=None, device=None,
    add_device=None, method=None, handshake_dir=None, chunk_size=None,
    encode=None, decode=None, fields=None, ragged=False, ragged_batch="packed",
    pack_fields=False)

    Collective over `comm`: every rank loads rows [lo, hi) of `source` (its
    balanced share, one pass) and every rank reads every sample.  With
    ``pack_fields=True`` the fixed fields of a sample are stored as one row
    of one variable (a batch is one read, packing.py); ragged fields keep
    their own variables.  Errors
    (including an exception raised by ``source[i]`` on one rank) are raised on
    every rank.  See docs/reference-torch.md.
    """

    def __init__(self, source, name, comm=None, ddstore_width=None, device=None,
                 add_device=None, method=None, handshake_dir=None, chunk_size=None,
                 encode=None, decode=None, fields=None, ragged=False, ragged_batch="packed",
                 pack_fields=False):
        self._ragged_opt = ragged
        self._ragged_batch = ragged_batch
        self._pack_opt = pack_fields
        self._pack = None
        try:
            self._construct(source, name, comm, ddstore_width, device, add_device, method,
                            handshake_dir, chunk_size, encode, decode, fields)
        except pyddstore.DDStoreError as e:
            if not _comm.is_out_of_step(e):
                raise
            # a collective step timed out (or the ranks are out of step): name
            # the collective call the user made
            raise pyddstore.DDStoreError(f"DistDataset({name!r}): {e}") from None

    def _construct(self, source, name, comm, ddstore_width, device, add_device, method,
                   handshake_dir, chunk_size, encode, decode, fields):
        if not isinstance(name, str) or not name or "/" in name or len(name) > 200:
            raise ValueError(f"name must be a non-empty string without '/' (at most 200 "
                             f"characters), got {name!r}")
        self.name = name
        hs = env.handshake_dir(handshake_dir)
        self.comm = _comm.resolve(comm, hs, name)      # may raise (no comm to agree over)
        self.handshake_dir = hs
        self.decode = decode
        self.encode = encode
        self.ddstore = None
        self._pid = os.getpid()

        # 1. arguments (agreed: a bad argument on one rank fails every rank)
        def check_args():
            m = method
            if m is None:
                m = env.method(0) if env.method_is_set() else \
                    _backends.default_method(self.comm.kind == "mpi")
            b = _backends.row(m)
            if b["needs_mpi_comm"] and self.comm.kind != "mpi":
                raise ValueError(f"method={m} ({b['help']}) needs an MPI communicator; comm is "
                                 f"{self.comm.kind} (use method=1 or 2)")
            if b["needs_handshake"] and not hs:
                raise ValueError(f"method={m} needs handshake_dir= (or DDSTORE_HANDSHAKE_DIR)")
            if fields is not None and encode is not None:
                raise ValueError("fields= cannot be combined with encode= (select the "
                                 "fields in encode instead)")
            if chunk_size is not None:
                c = operator.index(chunk_size)
                if c < 1:
                    raise ValueError(f"chunk_size must be >= 1, got {c}")
            if chunk_size is not None and add_device is not None:
                raise ValueError(f"chunk_size cannot be combined with add_device="
                                 f"{add_device!r} (chunked loading fills host storage "
                                 "only); leave one of them unset")
            if self._ragged_batch not in _rg.RAGGED_BATCH:
                raise ValueError(f"ragged_batch must be one of {_rg.RAGGED_BATCH}, got "
                                 f"{self._ragged_batch!r}")
            if not isinstance(self._pack_opt, (bool, np.bool_)):
                raise TypeError(f"pack_fields must be True or False, got "
                                f"{self._pack_opt!r}")
            if _rg.ragged_mode(self._ragged_opt) is not None and chunk_size is not None:
                raise ValueError("chunk_size cannot be combined with ragged= (ragged fields "
                                 "are loaded in one pass: their sizes must all be known "
                                 "before the store is sized); leave chunk_size unset")
            w = None
            if ddstore_width is not None:
                w = operator.index(ddstore_width)
                if w < 1:
                    raise ValueError(f"ddstore_width must be >= 1, got {w}")
                w = min(w, self.comm.size)
                if b["needs_handshake"] and w < self.comm.size:
                    raise ValueError(f"method={m} needs one group: ddstore_width must be at "
                                     "least the number of ranks")
            for d in (device, add_device):
                if d is not None:
                    torch.device(d)  # raises on a bad device string
            return m, w

        self.method, width = _comm.run_agreed(self.comm, check_args, "arguments")
        self.device = _device(device)
        self.add_device = _device(add_device)
        self.chunk_size = None if chunk_size is None else operator.index(chunk_size)

        # 2. the store communicator (ddstore_width: independent groups)
        self.store_comm = self.comm if width is None or width >= self.comm.size else \
            self.comm.split(width)

        # 3. length and share
        n = _comm.run_agreed(self.comm, lambda: operator.index(len(source)), "len(source)")
        lens = self.comm.allgather(n)
        if any(x != n for x in lens):   # every rank sees the same list: all raise
            raise ValueError(f"DistDataset '{name}': len(source) differs across ranks: "
                             f"{lens}")
        self.total = n
        sr, ss = self.store_comm.rank, self.store_comm.size
        self.lo, self.hi = _share(n, sr, ss)

        def check_share():
            if n < ss:
                raise ValueError(f"DistDataset '{name}': {n} samples for {ss} ranks; every "
                                 "rank must own at least one sample")
        _comm.run_agreed(self.comm, check_share, "share")

        # 4. the first sample: schema (checked across ranks)
        mode_box = [None]

        def first():
            s = source[self.lo]
            st = encode(s) if encode is not None else s
            may = _rg.ragged_mode(self._ragged_opt)
            pyg = _is_pyg(st)
            where = f"source[{self.lo}]" + (" (encoded)" if encode else "")
            full = Schema.of(st, where, keys=fields,
                             may_vary=(lambda k: True) if (pyg or may) else None)
            if pyg and may is None:
                mode_box[0] = _rg.pyg_mode(full)
            else:
                mode_box[0] = _rg.ragged_mode(self._ragged_opt, full.keys)
            m = mode_box[0]
            for f in full.fields:
                if f.disp == 0 and (m is None or m(f.key) is None):
                    raise ValueError(f"{where}[{f.key!r}]: a field with no elements (shape "
                                     f"{f.shape}) cannot be stored (a fixed field)")
            if pyg and self._ragged_batch != "packed":
                raise ValueError("torch_geometric Data samples are batched as a "
                                 "torch_geometric Batch (packed): ragged_batch='padded' "
                                 "does not apply")
            if pyg and self.chunk_size is not None:
                raise ValueError("chunk_size cannot be used with torch_geometric Data samples "
                                 "(their fields are ragged: loaded in one pass)")
            return st, full

        first_stored, full = _comm.run_agreed(self.comm, first, f"loading '{name}'")
        self._mode_of = mode_box[0]
        descs = self.comm.allgather(_rg.comparable(full.describe(), self._mode_of))
        bad = [r for r, d in enumerate(descs) if d != descs[0]]
        if bad:   # every rank sees the same list: all raise
            raise ValueError(
                f"DistDataset '{name}': the samples of rank {bad[0]} differ from rank 0's: "
                f"{_diff(descs[0], descs[bad[0]])}; shapes and dtypes must be fixed across "
                "samples (DistDataset(ragged=True) stores tensor/ndarray fields whose size "
                "varies along one axis)")
        # variable names: one per stored field, by position
        for i, f in enumerate(full.fields):
            f.var = f"{name}/{i}"
        self.schema = full
        self._pack_opt = bool(self._pack_opt)
        if self._pack_opt and self._mode_of is None:     # ragged: once they are known
            self._pack = _pk.layout_of(name, full)

        # 5. the store and the shard
        try:
            store, err = self._make_store(), None
        except Exception as e:  # noqa: BLE001 - agreed below
            store, err = None, e
        try:
            _comm.agree(self.comm, err, "creating the store")
        except BaseException:
            if store is not None:     # another group failed: release ours (collective
                store.free()          # within our group, whose members all succeeded)
            raise
        self.ddstore = store
        try:
            self._load(source, encode, first_stored)
        except BaseException:
            self.ddstore = None
            raise
        split = _backends.row(self.method)["needs_handshake"]
        if split and self.store_comm.rank == 0:
            _comm.run_agreed(self.comm, self._write_meta, "writing meta.json")
        elif split:
            _comm.run_agreed(self.comm, lambda: None, "writing meta.json")
        self._init_reading()

    # -- construction helpers ----------------------------------------------
    def _make_store(self):
        """PyDDStore over the store communicator (collective in the group)."""
        kw = dict(method=self.method)
        if self.handshake_dir:
            kw["handshake_dir"] = self.handshake_dir
        if self.store_comm.kind == "file" and self.store_comm.ns:
            kw["exchange_ns"] = self.store_comm.ns
        # the namespace the store publishes its records under (method 2)
        self._ns = env.exchange_ns(kw.get("exchange_ns"))
        return pyddstore.PyDDStore(self.store_comm.store_comm, **kw)

    def _load(self, source, encode, first_stored):
        share = self.hi - self.lo
        fields = self.schema.fields
        bar = _progress(share, self.name, self.comm.rank)
        try:
            if self._mode_of is not None:
                self._load_ragged(source, encode, first_stored, fields, share, bar)
            elif self.chunk_size is None:
                self._load_whole(source, encode, first_stored, fields, share, bar)
            else:
                self._load_chunked(source, encode, first_stored, fields, share, bar)
        except BaseException:
            try:
                self.ddstore.free()
            except Exception:  # noqa: BLE001 - the original error matters
                pass
            raise
        finally:
            if bar is not None:
                bar.close()

    def _sample_values(self, source, encode, first_stored, j, check=True):
        if j == 0:
            s = first_stored
        else:
            s = source[self.lo + j]
            if encode is not None:
                s = encode(s)
        where = f"source[{self.lo + j}]" + (" (encoded)" if encode is not None else "")
        return self.schema.values(s, where, check)

    def _fill(self, source, encode, first_stored, fields, arrays, j0, j1, bar):
        for j in range(j0, j1):
            vals = self._sample_values(source, encode, first_stored, j)
            r = j - j0
            for f, a, v in zip(fields, arrays, vals):
                f.store_into(a, r, v)
            if bar is not None and (j & 255) == 255:
                bar.update(256)

    def _add_fixed(self, f, flat):
        """Collective: this rank's shard (share, disp) of fixed field f."""
        if f.kind == "tensor" and self.add_device is not None:
            t = torch.from_numpy(flat).view(f.torch_dtype).to(self.add_device)
            ext.add_tensor(self.ddstore, f.var, t, stream_of(self.add_device))
        else:
            self.ddstore.add(f.var, f.for_store(flat))

    def _add_packed(self, rows):
        """Collective: this rank's shard (share, row_bytes) of the packed
        variable (add_device: in that device's memory, every packed field)."""
        if self.add_device is not None:
            t = torch.from_numpy(rows).to(self.add_device)
            ext.add_tensor(self.ddstore, self._pack.var, t, stream_of(self.add_device))
        else:
            self.ddstore.add(self._pack.var, rows)

    def _load_whole(self, source, encode, first_stored, fields, share, bar):
        pack = self._pack

        def fill():
            if pack is not None:      # the fields' arrays are views into the rows
                rows, arrays = pack.buffer(share)
            else:
                rows = None
                arrays = [np.empty((share,) + f.row_shape, dtype=f.np_dtype) for f in fields]
            self._fill(source, encode, first_stored, fields, arrays, 0, share, bar)
            return rows, arrays

        rows, arrays = _comm.run_agreed(self.comm, fill, f"loading '{self.name}'")
        if bar is not None:
            bar.n = share
            bar.refresh()

        def add():
            if rows is not None:
                self._add_packed(rows)
                return
            for k, (f, a) in enumerate(zip(fields, arrays)):
                self._add_fixed(f, a.reshape(share, -1))
                arrays[k] = None   # the store has its copy: drop ours now
        _comm.run_agreed(self.comm, add, f"storing '{self.name}'")

    def _load_ragged(self, source, encode, first_stored, fields, share, bar):
        """ragged=: every local sample scanned into per-field columns; the
        ranks agree which fields vary (and along which axis); fixed fields
        are added as whole shards, ragged ones with add_ragged."""
        mode_of = self._mode_of
        suffix = " (encoded)" if encode is not None else ""

        def fill():
            cols = []
            for f in fields:
                m = mode_of(f.key)
                if m == "auto" and f.kind not in RAGGED_KINDS:
                    m = None
                cols.append(_rg.Column(f, share, m, f"source[{self.lo}]{suffix}[{f.key!r}]"))
            for j in range(share):
                where = f"source[{self.lo + j}]{suffix}"
                vals = self._sample_values(source, encode, first_stored, j, check=False)
                for c, f, v in zip(cols, fields, vals):
                    c.put(j, v, f"{where}[{f.key!r}]")
                if bar is not None and (j & 255) == 255:
                    bar.update(256)
            return cols

        cols = _comm.run_agreed(self.comm, fill, f"loading '{self.name}'")
        if bar is not None:
            bar.n = share
            bar.refresh()
        reports = self.comm.allgather([c.report() for c in cols], "ragged fields")
        _comm.run_agreed(self.comm, lambda: _rg.decide(self.schema, cols, reports, mode_of,
                                                        self.name), "ragged fields")
        if self._pack_opt:       # the fixed fields are known now
            self._pack = _pk.layout_of(self.name, self.schema)
        pack = self._pack

        def add():
            if pack is not None:
                rows, views = pack.buffer(share)
                by_key = {f.key: c for f, c in zip(self.schema.fields, cols)}
                for f, v in zip(pack.fields, views):
                    v[...] = by_key[f.key].arr.reshape(v.shape)
                    by_key[f.key].drop()
                self._add_packed(rows)
                del rows, views
            for f, c in zip(self.schema.fields, cols):
                if f.axis is None and pack is not None:
                    continue
                if f.axis is None:
                    self._add_fixed(f, c.arr.reshape(share, -1))
                else:
                    vals, lengths = _rg.ragged_values(f, c, share)
                    self.ddstore.add_ragged(f.var, f.for_store(vals), lengths)
                c.drop()   # the store has its copy: drop ours now
        _comm.run_agreed(self.comm, add, f"storing '{self.name}'")

    def _load_chunked(self, source, encode, first_stored, fields, share, bar):
        pack = self._pack

        def init():
            if pack is not None:
                self.ddstore.init(pack.var, share, pack.row_bytes, 1, "uint8")
                return
            for f in fields:
                self.ddstore.init(f.var, share, f.disp, f.np_dtype.itemsize, f.dtype)
        _comm.run_agreed(self.comm, init, f"storing '{self.name}'")

        chunk = min(self.chunk_size, share)

        def fill_all():
            if pack is not None:
                rows, arrays = pack.buffer(chunk)
            else:
                arrays = [np.empty((chunk,) + f.row_shape, dtype=f.np_dtype) for f in fields]
            for j0 in range(0, share, chunk):
                j1 = min(j0 + chunk, share)
                self._fill(source, encode, first_stored, fields, arrays, j0, j1, bar)
                if pack is not None:
                    self.ddstore.update(pack.var, rows[:j1 - j0], j0)
                    continue
                for f, a in zip(fields, arrays):
                    self.ddstore.update(f.var, f.for_store(a[:j1 - j0].reshape(j1 - j0, -1)),
                                        j0)
        # no collective inside: a failing rank stops, the others finish, then all agree
        _comm.run_agreed(self.comm, fill_all, f"loading '{self.name}'")

    def _write_meta(self):
        """{name}.meta.json for DistDatasetReader, scoped to this run: the
        namespace, the core store's run id and the generation (creation time)
        of every variable's record, which a reader checks against the records
        it joins.  Written by the rank that wrote the records."""
        vars_ = self._vars_of(self.schema.fields)
        recs = [_read_record(self.handshake_dir, v, self._ns) for v in vars_]
        for v, r in zip(vars_, recs):
            if r is None:
                raise pyddstore.DDStoreError(
                    f"DistDataset '{self.name}': the record of '{v}' is missing in "
                    f"{self.handshake_dir} right after it was published (another job "
                    "removed it? give each job its own exchange_ns)")
        runs = {r["run_id"] for r in recs}
        if len(runs) != 1 or recs[0]["run_id"] != recs[-1]["run_id"]:
            raise pyddstore.DDStoreError(
                f"DistDataset '{self.name}': the records of its variables in "
                f"{self.handshake_dir} belong to {len(runs)} core runs (another job "
                "publishes the same names: give each job its own exchange_ns)")
        run_id = f"{recs[0]['run_id']:016x}"
        meta = {
            "format": _META_FORMAT,
            "version": _META_VERSION_PACKED if self._pack is not None else
            _META_VERSION if self.schema.ragged else _META_VERSION_FIXED,
            "name": self.name,
            "n_core": self.store_comm.size, "total": self.total,
            "created": time.time(),
            "exchange_ns": self._ns, "run_id": run_id,
            "generation": [int(r["ctime_ns"]) for r in recs],
            "schema": self.schema.describe(),
            "vars": vars_,
        }
        if self._pack is not None:
            meta[_pk.META_KEY] = self._pack.describe()
        path = os.path.join(self.handshake_dir, _meta_file_name(self.name, self._ns))
        _write_json_atomic(path, meta)
        # removed by free(), or when the dataset is collected or the
        # interpreter exits without free(), as the core removes its records
        self._meta = weakref.finalize(self, _remove_meta_file, path, run_id, os.getpid())

    def _remove_meta(self):
        """free(): the meta file goes with the run (only if it is still ours:
        a later run's is left alone)."""
        fin = getattr(self, "_meta", None)
        self._meta = None
        if fin is not None:
            fin()

    # -- lifetime -----------------------------------------------------------
    def free(self):
        """Collective (method 0): unregister alloc()'d buffers and release the
        store.  Idempotent; reads afterwards raise DDStoreError."""
        if self.ddstore is None or self._freed:
            return
        self._not_forked("free")
        self._release_all()
        self._freed = True
        self._remove_meta()       # before the records: no reader meets one without them
        self.ddstore.free()


class DistDatasetReader(_Stored):
    """The same dataset, read from a separate (method 2) extra job.

    DistDatasetReader(name, handshake_dir=None, n_core=None, device=None,
    decode=None, exchange_ns=None, ragged_batch="packed", pack_fields=None): fields
    come from the core job's ``{name}.meta.json`` in handshake_dir (written by
    its DistDataset(method=2)), with the layout (pack_fields: the packed row;
    pack_fields=True / False asserts it and is a ValueError when the core job
    stored the other layout), which names the core run (namespace, run id, the
    generation of every record); the reader joins only records of that run
    and waits (DDSTORE_HANDSHAKE_TIMEOUT_S) while the meta file is missing
    or belongs to another run than the records (a run still loading, a
    leftover).  Construct it on every rank of the extra job (the PyDDStore
    is created with comm None); reads are local.
    """

    def __init__(self, name, handshake_dir=None, n_core=None, device=None, decode=None,
                 exchange_ns=None, ragged_batch="packed", pack_fields=None):
        if ragged_batch not in _rg.RAGGED_BATCH:
            raise ValueError(f"ragged_batch must be one of {_rg.RAGGED_BATCH}, got "
                             f"{ragged_batch!r}")
        if pack_fields is not None and not isinstance(pack_fields, (bool, np.bool_)):
            raise TypeError(f"pack_fields must be None, True or False, got {pack_fields!r}")
        self._ragged_batch = ragged_batch
        hs = env.handshake_dir(handshake_dir)
        if not hs:
            raise ValueError("DistDatasetReader needs handshake_dir= (or "
                             "DDSTORE_HANDSHAKE_DIR): where the core job published")
        self.name = name
        self.handshake_dir = hs
        self.method = 2
        self.decode = decode
        self.device = _device(device)
        self.meta, self.schema, self.ddstore = _join_run(
            hs, name, env.exchange_ns(exchange_ns), n_core)
        self.total = int(self.meta["total"])
        self.n_core = int(n_core) if n_core else int(self.meta["n_core"])
        pk = self.meta.get(_pk.META_KEY)
        self._pack = None if pk is None else _pk.RowLayout(
            pk["var"], [f for f in self.schema.fields if f.offset is not None],
            pk["row_bytes"])
        if pack_fields is not None and bool(pack_fields) != (pk is not None):
            self.ddstore.free()
            raise ValueError(
                f"DistDatasetReader '{name}': pack_fields={bool(pack_fields)}, but the core "
                f"job stored the dataset {'packed (one row per sample)' if pk else 'one variable per field'} "
                "(its meta file); leave pack_fields=None to read what it stored")
        self._init_reading()

    def free(self):
        """Release the reader's store.  Idempotent."""
        if self._freed:
            return
        self._not_forked("free")
        self._release_all()
        self._freed = True
        self.ddstore.free()


def _enc_name(s):
    """The file-name encoding of method-2 records (C ddofi_hs_file_name):
    [A-Za-z0-9._-] kept (but a leading '.'), every other byte as %XX."""
    out = []
    for i, b in enumerate(s.encode("utf-8")):
        ch = chr(b)
        if (ch.isascii() and (ch.isalnum() or ch in "._-")) and not (i == 0 and ch == "."):
            out.append(ch)
        else:
            out.append(f"%{b:02X}")
    return "".join(out)


def _remove_meta_file(path, run_id, pid):
    """Remove the meta file at `path` if it is still the one of run `run_id`
    (and only in the process that wrote it: never from a forked child)."""
    if os.getpid() != pid:
        return
    try:
        data = pyddstore._core._file_read(path, _META_MAX_BYTES, "meta file")
        if data is not None and json.loads(data.decode("utf-8")).get("run_id") == run_id:
            os.unlink(path)
    except (OSError, ValueError, AttributeError, pyddstore.DDStoreError):
        pass    # not ours, or unreadable: nothing of ours to remove


def _meta_file_name(name, ns=""):
    """{name}.meta.json, or {ns}@{name}.meta.json in a namespace (the names
    encoded like the records')."""
    return (f"{_enc_name(ns)}@" if ns else "") + f"{_enc_name(name)}.meta.json"


def _record_path(hs, var, ns):
    return os.path.join(hs, (f"{_enc_name(ns)}@" if ns else "") + f"{_enc_name(var)}.ddshs")


def _read_record(hs, var, ns):
    """The record of `var` (a dict, _handshake_parse) or None when missing."""
    path = _record_path(hs, var, ns)
    data = pyddstore._core._file_read(path, _RECORD_MAX_BYTES, "handshake record")
    if data is None:
        return None
    return pyddstore._core._handshake_parse(data, path)


def _write_json_atomic(path, obj):
    """Publish `obj` as JSON at `path` with the strict publish of ddstore-core
    (a fresh O_EXCL|O_NOFOLLOW temporary file, 0600, fsync, rename, directory
    fsync) in a private directory (created 0700; someone else's, or one
    others may write to, is refused)."""
    d = os.path.dirname(path) or "."
    pyddstore._core._dir_prepare(d, "handshake directory")
    data = json.dumps(obj, indent=1, default=_json_default).encode("utf-8")
    pyddstore._core._file_publish(d, os.path.basename(path), data, fsync=True,
                                  what=f"meta file {path}")


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, tuple):
        return list(o)
    raise TypeError(f"not JSON-serialisable: {type(o).__name__}")


def _bad_meta(path, field, why):
    return ValueError(f"{path}: field '{field}' {why} (a damaged or foreign meta file)")


def _int_field(meta, path, field, lo):
    v = meta.get(field)
    if type(v) is not int or v < lo:
        raise _bad_meta(path, field, f"must be an integer >= {lo}, got {v!r}"[:300])
    return v


def _parse_meta(path, data, name):
    """The validated meta dict and its Schema; ValueError naming the file and
    the field otherwise (never a raw KeyError / RecursionError)."""
    try:
        meta = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise ValueError(f"{path}: not a meta file: JSON nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{path}: not a meta file: not valid JSON ({e})") from None
    if type(meta) is not dict:
        raise ValueError(f"{path}: not a meta file: a JSON {type(meta).__name__}, "
                         "expected an object")
    if meta.get("format") != _META_FORMAT:
        raise _bad_meta(path, "format", f"must be {_META_FORMAT!r}")
    version = meta.get("version")
    if type(version) is not int or version not in (1, _META_VERSION_FIXED, _META_VERSION,
                                                   _META_VERSION_PACKED):
        raise ValueError(f"{path}: not a pyddstore.torch meta file of version "
                         f"{_META_VERSION_PACKED} (field 'version' is {version!r})"[:400])
    if (_pk.META_KEY in meta) != (version == _META_VERSION_PACKED):
        raise _bad_meta(path, _pk.META_KEY, f"is {'missing' if version == 4 else 'present'} "
                        f"in a meta file of version {version}")
    if meta.get("name") != name:
        raise _bad_meta(path, "name", f"is {meta.get('name')!r}, expected {name!r}"[:300])
    _int_field(meta, path, "n_core", 1)
    _int_field(meta, path, "total", 0)
    vars_ = meta.get("vars")
    if type(vars_) is not list or not vars_ or any(type(v) is not str or not v for v in vars_):
        raise _bad_meta(path, "vars", "must be a non-empty list of variable names")
    desc = meta.get("schema")
    if type(desc) is not dict or type(desc.get("fields")) is not list:
        raise _bad_meta(path, "schema", "must be an object with a list of fields")
    var_of, packed = _pk.layout_from_meta(meta, path, lambda f, w: _bad_meta(path, f, w))
    if version >= 2:
        if type(meta.get("exchange_ns")) is not str:
            raise _bad_meta(path, "exchange_ns", "must be a string")
        run = meta.get("run_id")
        if type(run) is not str or len(run) != 16 or \
                any(c not in "0123456789abcdef" for c in run):
            raise _bad_meta(path, "run_id", "must be 16 lowercase hex digits")
        gen = meta.get("generation")
        if type(gen) is not list or len(gen) != len(vars_) or \
                any(type(g) is not int or g <= 0 for g in gen):
            raise _bad_meta(path, "generation", f"must be {len(vars_)} positive integers "
                            "(one record creation time per variable)")
    try:
        schema = Schema.from_description(desc, lambda i: var_of[i])
    except RecursionError:
        raise _bad_meta(path, "schema", "is nested too deeply") from None
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
        raise _bad_meta(path, "schema", f"is not a valid sample description "
                        f"({type(e).__name__}: {e})"[:400]) from None
    if packed is not None:
        infix = [f for f in schema.fields if f.offset is not None]
        if any(f.axis is None and f.offset is None for f in schema.fields) or not infix:
            raise _bad_meta(path, "schema", "packed: every fixed field needs an offset")
        _pk.check_layout(infix, packed["row_bytes"], path,
                         lambda f, w: _bad_meta(path, f, w))
    return meta, schema


def _load_meta(hs, name, ns):
    """(path, meta, schema); meta None when there is no meta file (yet).  A
    reader without a namespace takes the one of any namespace when only one
    exists."""
    path = os.path.join(hs, _meta_file_name(name, ns))
    # someone else's directory, or one others may write to, is not trusted
    if not pyddstore._core._dir_check(hs, "handshake directory"):
        return path, None, None
    data = pyddstore._core._file_read(path, _META_MAX_BYTES, "meta file")
    if data is None and not ns:
        suffix = "@" + _meta_file_name(name)
        try:
            found = sorted(f for f in os.listdir(hs) if f.endswith(suffix))
        except FileNotFoundError:
            found = []
        if len(found) > 1:
            raise ValueError(f"DistDatasetReader '{name}': meta files of several "
                             f"namespaces in {hs}: {', '.join(found)}; pass exchange_ns= "
                             "(or set DDSTORE_EXCHANGE_NS) to the core job's")
        if found:
            path = os.path.join(hs, found[0])
            data = pyddstore._core._file_read(path, _META_MAX_BYTES, "meta file")
    if data is None:
        return path, None, None
    meta, schema = _parse_meta(path, data, name)
    return path, meta, schema


def _read_meta(hs, name, ns=""):
    """Wait (DDSTORE_HANDSHAKE_TIMEOUT_S) for {name}.meta.json and return it,
    validated."""
    timeout = env.handshake_timeout()
    t0 = time.monotonic()
    while True:
        path, meta, _ = _load_meta(hs, name, ns)
        if meta is not None:
            return meta
        if time.monotonic() - t0 > timeout:
            raise pyddstore.DDStoreError(
                f"DistDatasetReader '{name}': {path} did not appear within {timeout:g} s "
                "(DDSTORE_HANDSHAKE_TIMEOUT_S); is the core job running with method=2 and "
                "the same handshake_dir?")
        time.sleep(0.2)


def _records_match(hs, path, meta):
    """None when every variable's record belongs to the meta file's run and
    generation, else why not."""
    ns = meta["exchange_ns"]
    for var, gen in zip(meta["vars"], meta["generation"]):
        rec = _read_record(hs, var, ns)
        rp = _record_path(hs, var, ns)
        if rec is None:
            return (f"{path} names core run {meta['run_id']}, but {rp} does not exist "
                    "(the run has freed its variables, or a new run is publishing)")
        run = f"{rec['run_id']:016x}"
        if run != meta["run_id"] or rec["ctime_ns"] != gen:
            return (f"{path} names core run {meta['run_id']} (record generation {gen}), "
                    f"but {rp} belongs to core run {run} (generation {rec['ctime_ns']}): a "
                    "new run is loading, or the meta file is a leftover")
    return None


def _join_run(hs, name, ns, n_core):
    """(meta, schema, store) of one core run: the meta file and the records
    of every variable agree on the run before and after the joins (records
    only ever move to newer runs, so what was joined in between is that
    run's).  Waits up to DDSTORE_HANDSHAKE_TIMEOUT_S for such a state."""
    timeout = env.handshake_timeout()
    t0 = time.monotonic()
    why = None
    while True:
        path, meta, schema = _load_meta(hs, name, ns)
        if meta is None:
            why = (f"{path} does not exist (is the core job running with method=2 and the "
                   "same handshake_dir, and has it finished loading?)")
        elif meta["version"] < 2:
            raise ValueError(f"{path}: written by an older pyddstore (meta format version "
                             f"{meta['version']}, without the run id a reader checks the "
                             "records against); rerun the core job with this version")
        else:
            why = _records_match(hs, path, meta)
            if why is None:
                store = pyddstore.PyDDStore(None, method=2, handshake_dir=hs,
                                            n_core=int(n_core) if n_core else meta["n_core"],
                                            exchange_ns=meta["exchange_ns"])
                try:
                    for var in meta["vars"]:
                        store.join(var)
                    why = _records_match(hs, path, meta)
                    if why is None:
                        info = store.info(meta["vars"][0])
                        if int(info[0]) != meta["total"]:
                            raise ValueError(
                                f"DistDatasetReader '{name}': {path} says {meta['total']} "
                                f"rows, the core job's records {info[0]}")
                        pk = meta.get(_pk.META_KEY)
                        if pk is not None and int(info[1]) * int(info[2]) != pk["row_bytes"]:
                            raise ValueError(
                                f"DistDatasetReader '{name}': {path} says the packed rows "
                                f"of '{pk['var']}' are {pk['row_bytes']} bytes, the core "
                                f"job's record {int(info[1]) * int(info[2])}: the layout "
                                "does not match the stored variable")
                        return meta, schema, store
                except BaseException:
                    store.free()
                    raise
                store.free()
        if time.monotonic() - t0 > timeout:
            raise pyddstore.DDStoreError(
                f"DistDatasetReader '{name}': no usable meta file after {timeout:g} s "
                f"(DDSTORE_HANDSHAKE_TIMEOUT_S): {why}")
        time.sleep(0.1)


def _diff(a, b):
    if a.get("structure") != b.get("structure"):
        return f"structure {a.get('structure')} vs {b.get('structure')}"
    fa, fb = a["fields"], b["fields"]
    if len(fa) != len(fb):
        return f"{len(fa)} vs {len(fb)} fields"
    for x, y in zip(fa, fb):
        if x != y:
            return f"field {x['key']!r}: {x} vs {y}"
    return "different descriptions"


class WindowRangeError(IndexError, ValueError):
    """A WindowedDataset start whose window leaves the dataset: an IndexError
    that is also a ValueError (what it was before)."""


class WindowedDataset(torch.utils.data.Dataset):
    """Samples made of several stored rows (time windows, clips).

    WindowedDataset(ds, window, stride=1, dilation=1, starts=None, fields=None):
    sample i is rows s, s+dilation, ..., s+(window-1)*dilation with
    s = i*stride or starts[i]; every field stacked (window, *shape), keeping
    its kind: tensor fields are tensors, numpy array and numpy scalar fields
    numpy arrays, records numpy structured arrays, Python numbers numpy
    arrays (int64 / float64 / bool), as the original.  ``fields`` selects as
    DistDataset's does; with ``fields`` a window is a dict keyed by field (as
    the original).  A batch is one read_rows().
    """

    def __init__(self, ds, window, stride=1, dilation=1, starts=None, fields=None):
        if not hasattr(ds, "read_rows") or not hasattr(ds, "schema"):
            raise TypeError("WindowedDataset needs a DistDataset or DistDatasetReader, got "
                            f"{type(ds).__name__}")
        for what, v in (("window", window), ("stride", stride), ("dilation", dilation)):
            v = operator.index(v)
            if v < 1:
                raise ValueError(f"WindowedDataset: {what} must be >= 1, got {v}")
        self.ds = ds
        self.window = operator.index(window)
        self.stride = operator.index(stride)
        self.dilation = operator.index(dilation)
        self.schema = ds.schema
        if fields is not None:       # a dict keyed by field, as the original
            sel = ds.schema.select(fields)
            self.schema = Schema("dict", sel.fields, None, len(sel.fields))
        if self.schema.ragged:
            raise ValueError(f"WindowedDataset: field(s) {[f.key for f in self.schema.ragged]!r} "
                             "are ragged; windows stack fixed-size rows (select fixed "
                             "fields with fields=)")
        self._keys = self.schema.keys
        n = len(ds)
        span = (self.window - 1) * self.dilation + 1
        self.span = span
        if starts is None:
            self._starts = None
            self._len = 0 if n < span else (n - span) // self.stride + 1
        else:
            s = np.asarray(starts)
            if s.ndim != 1 or (s.size and s.dtype.kind not in "iu"):
                raise ValueError("WindowedDataset: starts must be a 1-D sequence of integers")
            s = s.astype(np.int64)
            bad = np.nonzero((s < 0) | (s + span > n))[0]
            if bad.size:
                k = int(bad[0])
                raise WindowRangeError(
                    f"WindowedDataset: starts[{k}] = {int(s[k])} needs rows "
                    f"{int(s[k])}..{int(s[k]) + span - 1}, outside [0, {n})")
            self._starts = torch.from_numpy(s)
            self._len = int(s.size)
        self._offsets = torch.arange(self.window, dtype=torch.int64) * self.dilation

    def __len__(self):
        return self._len

    @property
    def ddstore(self):
        return self.ds.ddstore

    @property
    def shapes(self):
        """{key: (window, *field shape)}, tuples of ints."""
        return {f.key: (self.window,) + tuple(int(d) for d in f.shape)
                for f in self.schema.fields}

    @property
    def dtypes(self):
        """{key: dtype name} as DistDataset.dtypes."""
        return {f.key: f.dtype_name() for f in self.schema.fields}

    def _rows(self, idx):
        idx = ext.seq_indices(idx, self._len, "WindowedDataset")
        s = self._starts[idx] if self._starts is not None else idx * self.stride
        return (s[:, None] + self._offsets[None, :]).reshape(-1), int(idx.numel())

    def _windows(self, indices):
        """Per field, the batch of windows (n, window, *shape): tensors
        (records: numpy structured arrays)."""
        rows, n = self._rows(indices)
        got = self.ds.read_rows(rows, fields=self._keys)
        out = []
        for f in self.schema.fields:
            v = got[f.key]
            out.append(v.reshape((n, self.window) + tuple(v.shape[1:])))
        return out

    def _per_sample(self, vals):
        """Per field, the list of per-sample windows, of the field's kind."""
        cols = []
        for f, v in zip(self.schema.fields, vals):
            if f.kind in ("ndarray", "npscalar", "int", "float", "bool"):
                a = v.numpy() if v.device.type == "cpu" else v.cpu().numpy()
                cols.append(list(a))
            elif isinstance(v, torch.Tensor):
                cols.append(list(v.unbind(0)))
            else:
                cols.append(list(v))
        return cols

    def __getitem__(self, i):
        i = operator.index(i)
        return self.schema.build([c[0] for c in self._per_sample(self._windows([i]))])

    def __getitems__(self, indices):
        return self.schema.build_many(self._per_sample(self._windows(indices)))

    def read_rows(self, rows, fields=None, out=None):
        return self.ds.read_rows(rows, fields=fields, out=out)

    def get_profile(self, field=None):
        return self.ds.get_profile(field)

    # direct collate: one read_rows per batch, already in batch form
    def _fast_collate_ok(self):
        return not self.schema.has_records

    def _collate(self, indices, pin_memory=False, out=None):
        vals = self._windows(indices)
        if pin_memory:
            vals = [v.pin_memory() if isinstance(v, torch.Tensor) and v.device.type == "cpu"
                    else v for v in vals]
        return self.schema.build_batch(vals)

    def _store_datasets(self):
        return self.ds._store_datasets()


def row_of(concat, source, index):
    """In a DistDataset over the ConcatDataset `concat`, the row of sample
    `index` of `concat.datasets[source]`.  `source` and `index` must be in
    range: a negative or too large one is an IndexError (no counting from
    the end: a window start computed past a file's beginning must not land
    in that file's tail)."""
    datasets = concat.datasets
    source = operator.index(source)
    if not 0 <= source < len(datasets):
        raise IndexError(f"row_of: source {source} out of range [0, {len(datasets)})")
    n = len(datasets[source])
    index = operator.index(index)
    if not 0 <= index < n:
        raise IndexError(f"row_of: index {index} out of range [0, {n}) of source "
                         f"{source}")
    start = concat.cumulative_sizes[source - 1] if source > 0 else 0
    return start + index


def sampler_kwargs(dataset):
    """``{"num_replicas": P, "rank": r}`` for
    ``torch.utils.data.distributed.DistributedSampler(dataset, **...)``: the
    data-parallel ranks of the whole job, from the dataset's communicator, so
    that no torch.distributed process group is needed (MPI jobs).

    With ``ddstore_width`` the store groups are replicas, not data-parallel
    partitions: the sampler still spans every rank of the job.  `dataset` is
    a DistDataset, a WindowedDataset, a Subset / ConcatDataset of them, or a
    DistDatasetReader (an extra job: its torch.distributed world when
    initialised, else MPI.COMM_WORLD, else RANK / WORLD_SIZE or Slurm's)."""
    comms, readers, seen, todo = [], [], set(), [dataset]
    while todo:
        d = todo.pop()
        if id(d) in seen:
            continue
        seen.add(id(d))
        if isinstance(d, DistDataset):
            comms.append(d.comm)
        elif isinstance(d, DistDatasetReader):
            readers.append(d)
        elif isinstance(d, WindowedDataset):
            todo.append(d.ds)
        else:
            inner = getattr(d, "dataset", None)
            if inner is not None:
                todo.append(inner)
            todo.extend(getattr(d, "datasets", None) or ())
    if comms:
        sizes = {(c.rank, c.size) for c in comms}
        if len(sizes) > 1:
            raise ValueError(f"sampler_kwargs: the datasets in {type(dataset).__name__} "
                             f"live on different communicators (rank, size): {sorted(sizes)}")
        rank, size = sizes.pop()
    elif readers:
        rank, size = _job_rank_size()
    else:
        raise TypeError(f"sampler_kwargs: expected a DistDataset, DistDatasetReader or "
                        f"WindowedDataset (or a Subset/ConcatDataset of them), got "
                        f"{type(dataset).__name__}")
    return {"num_replicas": int(size), "rank": int(rank)}


def _job_rank_size():
    """(rank, size) of this process in its job, for a DistDatasetReader."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    if getattr(pyddstore, "HAVE_MPI", False) and env.use_mpi():
        from mpi4py import MPI
        return MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    rs = env.slurm_rank_size()
    return rs if rs is not None else (0, 1)
