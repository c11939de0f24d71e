"""DistDataset, DistDatasetReader and sampler_kwargs (their reading side:
stored.py; WindowedDataset and row_of: windowed.py; the method-2 meta file:
metafile.py; loading progress: progress.py; packed rows: packing.py).

A DistDataset stores each field of a map-style dataset's samples as one
ddstore variable (one row per sample), or with pack_fields=True every fixed
field of a sample in one row of one variable (packing.py): each rank loads
only its share of the source, in one pass, and every rank reads every sample
with one-sided reads.
"""

import operator
import os
import time
import weakref

import numpy as np
import torch

import pyddstore
from pyddstore import _backends

from . import env
from . import comm as _comm
from . import metafile as _mf
from . import packing as _pk
from . import ragged as _rg
from ._ext import ext, stream_of
from .progress import progress as _progress
from .schema import RAGGED_KINDS, Schema
from .stored import _device, _Stored
from .windowed import WindowedDataset, WindowRangeError, row_of  # noqa: F401

# The names this module had before its parts moved out (tests import them from here).
from .metafile import (_record_path, meta_file_name as _meta_file_name,  # noqa: F401,E402
                       parse_meta as _parse_meta, read_meta as _read_meta,
                       write_json_atomic as _write_json_atomic)
from .progress import _LogProgress  # noqa: F401,E402

__all__ = ["DistDataset", "DistDatasetReader", "WindowedDataset", "row_of",
           "sampler_kwargs"]


def _share(n, rank, size):
    """[lo, hi) of a balanced split of n rows over size ranks."""
    base, extra = divmod(n, size)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (1 if rank < extra else 0)


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
        self._setup(name, comm, ddstore_width, device, add_device, method, handshake_dir,
                    chunk_size, encode, decode, fields)

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
            pyg = ext.is_pyg(st)
            where = f"source[{self.lo}]" + (" (encoded)" if encode else "")
            full = Schema.of(st, where, keys=fields,
                             may_vary=(lambda k: True) if (pyg or may) else None)
            if pyg and may is None:
                mode_box[0] = _rg.pyg_mode(full)
            else:
                mode_box[0] = _rg.ragged_mode(self._ragged_opt, full.keys)
            ext.first_checks(full.fields, mode_box[0], where, pyg, self._ragged_batch,
                             self.chunk_size is not None)
            return st, full

        first_stored, full = _comm.run_agreed(self.comm, first, f"loading '{name}'")
        self._mode_of = mode_box[0]
        # every rank sees the same list: all raise
        ext.check_descs(name, self.comm.allgather(_rg.comparable(full.describe(),
                                                                 self._mode_of)))
        # variable names: one per stored field, by position
        for i, f in enumerate(full.fields):
            f.var = f"{name}/{i}"
        self.schema = full
        self._pack_opt = bool(self._pack_opt)
        if self._pack_opt and self._mode_of is None:     # ragged: once they are known
            self._pack = _pk.layout_of(name, full)

        # 5. the store and the shard
        self._open_store()
        try:
            self._load(source, encode, first_stored)
        except BaseException:
            self.ddstore = None
            raise
        self._finish()

    # -- from files (ingest.py) ----------------------------------------------
    @classmethod
    def from_adios(cls, path, label, comm=None, keys=None, name=None, **kwargs):
        """Collective.  The samples of `label` in an ADIOS2 file of HydraGNN's
        layout (docs/files.md), each rank reading one selection per key of
        its share into its shard.  Item i is {key: tensor} (text keys: str).
        keys: the keys to load (default: all).  name: the dataset's name
        (default: the label).  kwargs: DistDataset's (method,
        ddstore_width, device, handshake_dir, decode, ragged_batch,
        pack_fields)."""
        from pyddstore.io.adios import AdiosSource
        from .ingest import build
        return build(cls, lambda: AdiosSource(path, label, keys), name or label, comm,
                     what=f"DistDataset.from_adios({str(path)!r}, {label!r})", **kwargs)

    @classmethod
    def from_hdf5(cls, path, group, comm=None, keys=None, name=None, **kwargs):
        """Collective.  The datasets of HDF5 group `group` (h5py): a fixed
        dataset [N, ...] gives each sample its row (a [N] one a 0-d tensor);
        a ragged key is a subgroup in ddstore's layout (docs/files.md).
        Otherwise as from_adios."""
        from pyddstore.io.hdf5 import Hdf5Source
        from .ingest import build
        return build(cls, lambda: Hdf5Source(path, group, keys), name or
                     str(group).strip("/").replace("/", "_") or "data", comm,
                     what=f"DistDataset.from_hdf5({str(path)!r}, {group!r})", **kwargs)

    @classmethod
    def from_parquet(cls, path, comm=None, columns=None, name=None, **kwargs):
        """Collective.  One sample per row of a Parquet file (pyarrow): list
        columns ragged (list<fixed_size_list<T, k>> -> [n, k]), fixed-size
        lists and scalars fixed, strings str; row groups divided among the
        ranks.  Otherwise as from_adios."""
        from pyddstore.io.parquet import ParquetSource
        from .ingest import build
        return build(cls, lambda: ParquetSource(path, columns), name or "data", comm,
                     what=f"DistDataset.from_parquet({str(path)!r})", **kwargs)

    # -- snapshots (attach.py; the format: pyddstore/snapshot.py) ---------------
    def save(self, dir, overwrite=False):
        """Collective.  Keep the dataset's shards in directory `dir` (one
        file per rank and a manifest written last) for DistDataset.attach
        in a later job step, at any world size.  Returns the seconds it
        took."""
        from .attach import save
        return save(self, dir, overwrite)

    @classmethod
    def attach(cls, dir, comm=None, name=None, verify=None, **kwargs):
        """Collective.  The dataset saved in `dir` (ds.save), at this job's
        world size: each rank reads only its range (at the saved world size,
        its own file).  verify: check the checksums of what is read
        (default DDSTORE_SNAPSHOT_VERIFY, on).  kwargs: DistDataset's
        (method, ddstore_width, device, handshake_dir, decode,
        ragged_batch)."""
        from .attach import attach
        return attach(cls, dir, comm, name, verify, **kwargs)

    # -- construction helpers ----------------------------------------------
    def _setup(self, name, comm, ddstore_width, device, add_device, method, handshake_dir,
               chunk_size, encode, decode, fields, ragged=None):
        """Steps 1 and 2 of every construction (from a source, from files):
        name, communicator, the agreed arguments, the store communicator."""
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
        ragged = _rg.ragged_mode(self._ragged_opt) is not None if ragged is None else ragged

        # 1. arguments (agreed: a bad argument on one rank fails every rank)
        def check_args():     # the checks in C++ (construct.cpp) but the devices'
            r = ext.dataset_args(
                method if method is not None else env.method(None), self.comm.kind,
                self.comm.size, bool(hs), fields is not None, encode is not None, chunk_size,
                add_device, self._ragged_batch, _rg.RAGGED_BATCH, self._pack_opt,
                ragged, ddstore_width)
            for d in (device, add_device):
                if d is not None:
                    torch.device(d)  # raises on a bad device string
            return r

        self.method, width = _comm.run_agreed(self.comm, check_args, "arguments")
        self.device = _device(device)
        self.add_device = _device(add_device)
        self.chunk_size = None if chunk_size is None else operator.index(chunk_size)

        # 2. the store communicator (ddstore_width: independent groups)
        self.store_comm = self.comm if width is None or width >= self.comm.size else \
            self.comm.split(width)

    def _open_store(self):
        """Collective: self.ddstore, created on every rank or on none."""
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

    def _fill_or_free(self, fill):
        """Collective: fill() loads the shards of self.ddstore; on any error
        (agreed inside fill) the store is freed on every rank, nothing stays
        half-loaded, and the error is raised."""
        try:
            fill()
        except BaseException:
            try:
                self.ddstore.free()
            except Exception:  # noqa: BLE001 - the original error matters
                pass
            self.ddstore = None
            raise

    def _finish(self):
        """Collective, once the shards are in: method 2's meta file, then
        the reading side."""
        split = _backends.row(self.method)["needs_handshake"]
        if split and self.store_comm.rank == 0:
            _comm.run_agreed(self.comm, self._write_meta, "writing meta.json")
        elif split:
            _comm.run_agreed(self.comm, lambda: None, "writing meta.json")
        self._init_reading()

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

    def _fill(self, source, encode, first_stored, fields, arrays, j0, j1, bar):
        self.schema.fill(source, encode, first_stored, self.lo, j0, j1, arrays, bar)

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
            self.schema.fill_columns(source, encode, first_stored, self.lo, share, cols, bar)
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
                    vals, lengths = c.ragged_values(f.axis, f.disp)
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
        recs = [_mf.read_record(self.handshake_dir, v, self._ns) for v in vars_]
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
            "format": _mf.FORMAT,
            "version": _mf.VERSION_PACKED if self._pack is not None else
            _mf.VERSION if self.schema.ragged else _mf.VERSION_FIXED,
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
        path = os.path.join(self.handshake_dir, _mf.meta_file_name(self.name, self._ns))
        _mf.write_json_atomic(path, meta)
        # removed by free(), or when the dataset is collected or the
        # interpreter exits without free(), as the core removes its records
        self._meta = weakref.finalize(self, _mf.remove_meta_file, path, run_id, os.getpid())

    def _remove_meta(self):
        """free(): the meta file goes with the run (only if it is still ours:
        a later run's is left alone), before the records: no reader meets
        one without them."""
        fin = getattr(self, "_meta", None)
        self._meta = None
        if fin is not None:
            fin()


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
        self.meta, self.schema, self.ddstore = _mf.join_run(
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
