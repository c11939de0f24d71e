"""The reading side shared by DistDataset and DistDatasetReader (_Stored):
items, batches, read_rows, alloc, the direct collate, readers per thread
and per fork (forked workers' read counters: ext.ForkedProfile)."""

import operator
import os
import threading

import numpy as np
import torch

import pyddstore
from pyddstore import _backends

from . import env
from . import ragged as _rg
from ._ext import as_index_tensor, ext, stream_of


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


class _Stored(torch.utils.data.Dataset):
    """Reading side shared by DistDataset and DistDatasetReader.

    Subclasses set: ddstore, name, schema (the fields read back), total,
    device, decode, method, _pack (the RowLayout of packed fixed fields, or
    None)."""

    def _init_reading(self):
        # the settings of the read path, read once here (issue 22: a
        # variable changed after creation does not change this dataset)
        self._batch_get = env.batch_get()
        ext.batch_pool(env.read().batch_pool_bytes)   # the direct collate's (one per process)
        self._fork_ok = env.fork_workers() or \
            not _backends.row(self.method)["fork_needs_env"]
        self._pid = os.getpid()
        self._tls = threading.local()
        self._fork = None            # (pid, reader) in a forked worker
        self._forked = ext.ForkedProfile(self._vars_of(self.schema.fields))
        self._allocs = {}            # id(bufs) -> list of registered tensors
        self._rowbufs = {}           # id(bufs) -> the packed row buffer of alloc()
        self._freed = False
        self._update_specs()

    @staticmethod
    def _vars_of(fields):
        """The store variables of `fields` (packed fields share one), in order."""
        return list(dict.fromkeys(f.var for f in fields))

    def _update_specs(self):
        """The read side in C++ (dataset.cpp), the fields parsed once: every
        read of fields enters it once (Reads); the host direct collate of a
        dataset without ragged fields returns the batch itself (Collator)."""
        st, pk = self.schema, self._pack
        who = f"{type(self).__name__} '{self.name}'"
        # packed: the names only name the field in errors
        self._reads = ext.Reads(
            [(f.key, f"{f.var}[{f.key!r}]" if pk else f.var, f.var, list(f.row_shape),
              f.dtype, f.kind == "tensor", f.axis is not None, f.offset) for f in st.fields],
            self.total, who, None if pk is None else (pk.var, pk.row_bytes))
        self._collator = None if st.ragged else ext.Collator(
            [(f"{f.var}[{f.key!r}]" if pk else f.var, f.row_shape, f.dtype) for f in st.fields],
            self.total, who, st.structure, st.ntype if st.structure == "namedtuple" else
            tuple(st.keys) if st.structure == "dict" else None,
            pk.spec(st.fields) if pk else None)

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
        if not self._fork_ok:
            raise RuntimeError(
                f"DistDataset '{self.name}': read from a forked DataLoader worker; set "
                "DDSTORE_FORK_WORKERS=1 before libfabric starts (job script, or "
                "os.environ before importing pyddstore; read when the dataset is created) so "
                "that each worker opens its own reader")
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
        idx = self._reads.indices(range(self.total) if indices is None else indices)
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
        return [f.batch_value(t) if f.axis is None else
                ext.split_batch([f], [t])[0] if f.kind == "str" else mk(f, *t)
                for f, t in zip(fields, ts)]

    # -- reads --------------------------------------------------------------
    def _read(self, fields, idx, out=None, pin_memory=False):
        """The C++ read of `fields` (None: all) for rows idx: a batch tensor
        (len(idx), *row_shape) per fixed field, (values, lengths, offsets,
        batch) per ragged one (Reads.read)."""
        dev = self._read_device()
        reader = self._reader()
        ts = self._reads.read(
            reader, idx, None if fields is None else [self.schema._pos[f.key] for f in fields],
            out, None if dev is None else str(dev), stream_of(dev) if dev is not None else 0,
            pin_memory, None if out is None else self._rowbufs.get(id(out)))
        if self._fork is not None and reader is self._fork[1]:
            self._forked.flush(reader, self._vars_of(fields or self.schema.fields))
        return ts

    def __getitem__(self, i):
        i = self._reads.index(i)
        ts = self._read(None, (i,))
        sample = self.schema.build_many(ext.split_batch(self.schema.fields, ts))[0]
        if self.decode is not None:
            sample = self.decode(sample, i)
        return sample

    def __getitems__(self, indices, out=None):
        """Samples for `indices` (a list, as DataLoader's fetcher calls it): one
        batched read per field (DDSTORE_BATCH_GET=0 when the dataset was created:
        one read per sample).  With out= (from alloc()) the samples are views
        into those buffers."""
        if not self._batch_get:
            return [self[i] for i in indices]
        idx = self._reads.indices(indices)
        fields = self.schema.fields
        ts = self._read(None, idx, out)
        samples = self.schema.build_many(ext.split_batch(fields, ts))
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
        ts = self._read(sel if fields is not None else None, as_index_tensor(rows), out)
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
        ts = [torch.empty((n,) + f.row_shape, dtype=f.torch_dtype,
                          device=dev if (dev is not None and f.kind == "tensor") else "cpu")
              for f in sel]
        reg = ts
        rowbuf = None
        if self._pack is not None:
            # the reads land in one row buffer (registered), then are scattered
            on_dev = dev is not None and any(f.kind == "tensor" for f in sel)
            rowbuf = torch.empty((n, self._pack.row_bytes), dtype=torch.uint8,
                                 device=dev if on_dev else "cpu")
            reg = [rowbuf]
        ext.register_all(self.ddstore, reg, [stream_of(t.device) if t.is_cuda else 0
                                             for t in reg])
        bufs = {f.key: t for f, t in zip(sel, ts)}
        self._allocs[id(bufs)] = reg
        if rowbuf is not None:
            self._rowbufs[id(bufs)] = rowbuf
        return bufs

    def free(self):
        """Release the store (DistDataset, method 0: collective) and the
        alloc()'d buffers.  Idempotent; reads afterwards raise DDStoreError."""
        if self.ddstore is None or self._freed:
            return
        self._not_forked("free")
        self._release_all()
        self._freed = True
        self._remove_meta()
        self.ddstore.free()

    def _remove_meta(self):
        """DistDataset: its meta file goes with the store."""

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
        ext.unregister_all(self.ddstore, ts, True)

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
        forked = self._fork is not None and self._fork[0] == os.getpid()
        return self._forked.total(self._fork[1] if forked else self.ddstore,
                                  self._vars_of(fields), os.getpid() == self._pid)

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
        ts = self._read(None, self._reads.indices(indices), out, pin_memory)
        return self.schema.build_batch(self._batch_values(self.schema.fields, ts))

    def _store_datasets(self):
        return [self]

    def _release_all(self):
        self._rowbufs.clear()
        for ts in self._allocs.values():
            ext.unregister_all(self.ddstore, ts, False)
        self._allocs.clear()

    def __reduce__(self):
        raise TypeError(
            f"{type(self).__name__} '{self.name}' cannot be pickled: its data lives in the "
            "job's store.  DataLoader workers must be forked (the default on Linux; methods "
            "1/2: set DDSTORE_FORK_WORKERS=1; method 0: every rank on one node) - "
            "spawn/forkserver are not supported; or use ThreadDataLoader")

    def __repr__(self):
        return (f"{type(self).__name__}('{self.name}', {self.total} samples, "
                f"fields {self.schema.fields}, method {self.method})")
