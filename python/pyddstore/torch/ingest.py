"""DistDataset from files (from_adios, from_hdf5, from_parquet): a file's
keys straight into the shards, without per-sample Python.

Every rank opens the file (pyddstore.io's Source) and the ranks check they
see the same one.  Each rank of a store group takes its range of samples,
reads its part of every key's per-sample sizes (no rank reads them all),
and the group's allgather of their sums gives where each rank's range
starts along the key's concatenated dimension.  A key whose samples all
have the same size is a fixed field, else a ragged one along that
dimension; text keys are str fields.  The store allocates each shard
(init / init_ragged) and the rank reads its one contiguous selection per key
into it in place (``PyDDStore._local_view``): no copy through a buffer, but
for keys concatenated along another dimension than the first (moved to the
front as the store keeps ragged rows) and packed rows.  Every error is
raised on every rank, and a failed load frees what it made.
"""

import sys
import time

import numpy as np

from . import comm as _comm
from . import env
from . import packing as _pk
from .progress import progress as _progress
from .schema import Field, Schema

# reads of at most this many bytes (progress between them; one selection)
CHUNK_BYTES = 256 << 20


def _sel_shape(key, n):
    s = list(key.shape)
    s[key.dim] = n
    return tuple(s)


def _field(key, var, lo_hi_min_max):
    """The Field of `key`: fixed when every sample has the same size along
    its dimension (or the key has one entry per sample), else ragged."""
    inner = list(key.inner)
    if key.kind == "str":
        return Field(key.key, "str", (-1,), "uint8", var=var, axis=0)
    if key.per_sample == "row":
        return Field(key.key, "tensor", tuple(inner), key.dtype, var=var)
    cmin, cmax = lo_hi_min_max
    shape = list(key.shape)
    if cmin == cmax and cmin > 0:   # (every sample empty: ragged, each a valid
        # empty tensor; a fixed field of no bytes cannot be stored)
        shape[key.dim] = cmin
        return Field(key.key, "tensor", tuple(shape), key.dtype, var=var)
    shape[key.dim] = -1
    return Field(key.key, "tensor", tuple(shape), key.dtype, var=var, axis=key.dim)


class _Plan:
    """This rank's part of the load: its samples, every key's sizes, where
    its range starts along each key's dimension, and the fields."""

    def __init__(self, ds, src, what):
        sc = ds.store_comm
        splits = src.split(sc.size)
        ds.lo, ds.hi = splits[sc.rank]
        share = ds.hi - ds.lo

        def local():
            if share < 1:
                raise ValueError(f"{what}: {src.total} samples for {sc.size} ranks "
                                 f"(rank {sc.rank} gets none); every rank must own at "
                                 "least one sample")
            cs = []
            for k in src.keys:
                c = np.ascontiguousarray(src.counts(k, ds.lo, ds.hi), dtype=np.int64)
                if c.shape != (share,) or (share and int(c.min()) < 0):
                    raise ValueError(f"{src.path}: key {k.key!r}: sizes of samples "
                                     f"[{ds.lo}, {ds.hi}) are not {share} counts >= 0")
                cs.append(c)
            return cs
        self.counts = _comm.run_agreed(ds.comm, local, f"{what}: sizes")
        mine = [[int(c.sum()), int(c.min()), int(c.max())] for c in self.counts]
        every = sc.allgather(mine, f"{what}: sizes")
        self.starts, stats = [], []
        for j, k in enumerate(src.keys):
            sums = [r[j][0] for r in every]
            self.starts.append(sum(sums[:sc.rank]))
            stats.append((min(r[j][1] for r in every), max(r[j][2] for r in every)))
            if k.per_sample == "count" and k.shape[k.dim] >= 0 and \
                    sum(sums) != k.shape[k.dim]:     # (-1: the file does not say)
                # every rank sees the same sums: every rank raises
                raise ValueError(f"{src.path}: key {k.key!r}: the samples' sizes sum to "
                                 f"{sum(sums)}, but the data has {k.shape[k.dim]} entries "
                                 f"along dimension {k.dim}")
        _comm.run_agreed(ds.comm, lambda: [
            src.check_starts(k, ds.lo, ds.hi, s, c) for k, s, c in
            zip(src.keys, self.starts, self.counts)], f"{what}: sizes")
        self.fields = [_field(k, f"{ds.name}/{i}", st)
                       for i, (k, st) in enumerate(zip(src.keys, stats))]
        self.bytes = sum(int(c.sum()) * int(np.prod(k.inner, dtype=np.int64)) *
                         np.dtype(k.dtype).itemsize for k, c in zip(src.keys, self.counts))


def _read_key(src, key, f, start, counts, out, bar):
    """The rank's selection of `key` into `out` ((share, *row_shape) rows of
    a fixed field, (elements, *row_shape) of a ragged one): in place when
    the key's dimension is the first, else through one buffer."""
    n = int(counts.sum())
    if n == 0:
        return                    # (a zero-size selection is an error in adios2)
    per = max(1, int(np.prod(key.inner, dtype=np.int64)) * np.dtype(out.dtype).itemsize)
    if key.dim == 0 and out.flags.c_contiguous:
        flat = out.reshape(_sel_shape(key, n))
        step = max(1, CHUNK_BYTES // per) if src.chunked else n
        for a in range(0, n, step):
            b = min(n, a + step)
            src.read(key, start + a, b - a, flat[a:b])
            if bar is not None:
                bar.update((b - a) * per)
        return
    tmp = np.empty(_sel_shape(key, n), dtype=out.dtype)
    src.read(key, start, n, tmp)
    if f.axis is not None or key.per_sample == "row":
        out[...] = np.moveaxis(tmp, key.dim, 0).reshape(out.shape)
    else:   # fixed, c entries per sample along key.dim: (.., share*c, ..) -> (share, .., c, ..)
        c = f.shape[key.dim]
        split = tmp.reshape(key.shape[:key.dim] + (len(counts), c) + key.shape[key.dim + 1:])
        out[...] = np.moveaxis(split, key.dim, 0).reshape(out.shape)
    if bar is not None:
        bar.update(n * per)


def build(cls, open_source, name, comm=None, what="", ddstore_width=None, device=None,
          add_device=None, method=None, handshake_dir=None, decode=None,
          ragged_batch="packed", pack_fields=False):
    """A `cls` (DistDataset) over the Source that open_source() returns on
    every rank.  Collective."""
    ds = cls.__new__(cls)
    ds._ragged_opt = True
    ds._ragged_batch = ragged_batch
    ds._pack_opt = pack_fields
    ds._pack = None
    ds._setup(name, comm, ddstore_width, device, add_device, method, handshake_dir, None,
              None, decode, None, ragged=True)
    if ds.add_device is not None:
        # every rank raises: add_device is the same argument everywhere
        raise ValueError(f"{what}: add_device= is not supported when loading from files "
                         "(the shards are filled in host memory); leave it unset")
    t0 = time.monotonic()
    src = _comm.run_agreed(ds.comm, open_source, f"{what}: opening")
    try:
        descs = ds.comm.allgather(src.describe(), f"{what}: checking the file")
        bad = [r for r, d in enumerate(descs) if d != descs[0]]
        if bad:
            raise ValueError(f"{what}: rank {bad[0]} sees another file than rank 0 "
                             f"(samples and keys: {descs[bad[0]]!r:.300} vs "
                             f"{descs[0]!r:.300}): every rank must read the same file")
        ds.total = src.total
        plan = _Plan(ds, src, what)
        ds.schema = Schema("dict", plan.fields)
        ds._mode_of = None
        ds._pack_opt = bool(ds._pack_opt)
        if ds._pack_opt:
            ds._pack = _pk.layout_of(name, ds.schema)
        ds._open_store()
        ds._fill_or_free(lambda: _load(ds, src, plan, what))
    finally:
        src.close()
    ds.ingest_report = _report(ds, plan.bytes, time.monotonic() - t0, what)
    ds._finish()
    return ds


def _load(ds, src, plan, what):
    store, share, pack = ds.ddstore, ds.hi - ds.lo, ds._pack
    fields = plan.fields

    def alloc():   # collective: every rank sizes every shard
        if pack is not None:
            store.init(pack.var, share, pack.row_bytes, 1, "uint8")
        for f, c in zip(fields, plan.counts):
            if f.axis is not None:
                store.init_ragged(f.var, c, f.disp, f.np_dtype.itemsize, f.dtype)
            elif pack is None:
                store.init(f.var, share, f.disp, f.np_dtype.itemsize, f.dtype)
    alloc()
    bar = _progress(plan.bytes, ds.name, ds.comm.rank, unit="B")

    def fill():
        rows = None
        if pack is not None:
            mv, _ = store._local_view(pack.var)
            rows = np.frombuffer(mv, dtype=np.uint8).reshape(share, pack.row_bytes)
        for k, f, st, c in zip(src.keys, fields, plan.starts, plan.counts):
            if f.axis is None and pack is not None:
                out = pack.view(rows, f)
            else:
                mv, _ = store._local_view(f.var)
                out = np.frombuffer(mv, dtype=f.np_dtype).reshape((-1,) + tuple(f.row_shape))
            _read_key(src, k, f, st, c, out, bar)
            del out
    try:
        _comm.run_agreed(ds.comm, fill, f"{what}: reading")
    finally:
        if bar is not None:
            bar.close()


def _report(ds, nbytes, seconds, what):
    """Every rank's bytes, seconds and GB/s (lists in rank order); rank 0
    prints one line (with DDSTORE_PROGRESS, as the loading progress)."""
    every = ds.comm.allgather([int(nbytes), int(seconds * 1e9)], f"{what}: report")
    every = [(b, ns / 1e9) for b, ns in every]      # (floats do not travel)
    rep = {"bytes": [b for b, _ in every], "seconds": [t for _, t in every],
           "gb_per_s": [b / t / 1e9 if t > 0 else 0.0 for b, t in every]}
    if ds.comm.rank == 0 and env.progress():
        r = rep["gb_per_s"]
        sys.stderr.write(
            f"ddstore: {what}: {ds.total} samples, {sum(rep['bytes']) / 1e9:.3f} GB in "
            f"{max(rep['seconds']):.2f} s on {ds.comm.size} ranks ({min(r):.2f}-{max(r):.2f} "
            f"GB/s per rank)\n")
    return rep
