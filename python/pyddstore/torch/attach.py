"""DistDataset snapshots: ds.save(dir) and DistDataset.attach(dir) (the
format and the reads: pyddstore/snapshot.py; docs/files.md).

save: the first store group's ranks write their shards (with
ddstore_width every group holds the whole dataset: one copy is kept) and
the manifest records the dataset: its name, samples, schema, the variable
of every field and the packed layout.  attach: at the saved world size every
rank takes its own file's rows; at any other the samples are split as
DistDataset splits them and each rank reads only its range.  The items are
the saved dataset's, whatever built it (a map-style source, from_adios,
another attach) and whatever method saved it.
"""

import time

from pyddstore import snapshot as _snap

from . import comm as _comm
from . import env
from . import packing as _pk
from .schema import Schema

KIND = "pyddstore.torch.DistDataset"


def save(ds, d, overwrite=False):
    """Collective over ds.comm."""
    ds._not_forked("save")
    if ds.ddstore is None or ds._freed:
        raise ValueError(f"DistDataset '{ds.name}': save() after free()")
    fields = ds.schema.fields
    desc = {"kind": KIND, "name": ds.name, "total": ds.total,
            "schema": ds.schema.describe(), "field_vars": [f.var for f in fields],
            "packed": ds._pack.describe() if ds._pack is not None else None}
    sc = ds.store_comm
    t0 = time.monotonic()
    err = None
    if ds.comm.rank == sc.rank:   # the first group (ranks 0 .. width-1)
        try:                      # (agreed inside the group, then with the others)
            _snap.save(ds.ddstore, d, sc, lambda e, w: _comm.agree(sc, e, w),
                       names=ds._vars_of(fields), dataset=desc, overwrite=overwrite)
        except Exception as e:  # noqa: BLE001 - agreed below
            err = e
    _comm.agree(ds.comm, err, f"DistDataset '{ds.name}': save({str(d)!r})")
    return time.monotonic() - t0


def attach(cls, d, comm=None, name=None, verify=None, ddstore_width=None, device=None,
           method=None, handshake_dir=None, decode=None, ragged_batch="packed"):
    """A `cls` (DistDataset) over snapshot directory `d`.  Collective."""
    ds = cls.__new__(cls)
    ds._ragged_opt = True
    ds._ragged_batch = ragged_batch
    ds._pack_opt = False
    ds._pack = None
    what = f"DistDataset.attach({str(d)!r})"
    t0 = time.monotonic()
    box = [verify]

    def manifest():
        if box[0] is None:
            box[0] = env.snapshot_verify()      # a bad value: ValueError
        m = _snap.load_manifest(d)
        desc = m.get("dataset")
        if not isinstance(desc, dict) or desc.get("kind") != KIND:
            raise ValueError(f"snapshot {d}: it holds a PyDDStore's variables, not a "
                             "DistDataset: attach it with PyDDStore.attach")
        try:
            fv = list(desc["field_vars"])
            schema = Schema.from_description(desc["schema"], fv.__getitem__)
            pack = None
            if desc.get("packed"):
                pk = desc["packed"]
                pack = _pk.RowLayout(pk["var"], [f for f in schema.fields
                                                 if f.offset is not None], pk["row_bytes"])
            total = int(desc["total"])
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise ValueError(f"snapshot {d}: the dataset's description in its manifest "
                             f"is damaged ({type(e).__name__}: {e})") from None
        return m, schema, pack, total
    ds._setup(name or _peek_name(d), comm, ddstore_width, device, None, method,
              handshake_dir, None, None, decode, None, ragged=True)
    m, schema, ds._pack, total = _comm.run_agreed(ds.comm, manifest, what)
    ids = ds.comm.allgather(m["id"], f"{what}: id")
    if any(i != ids[0] for i in ids):
        raise ValueError(f"{what}: the ranks read different snapshots (ids {sorted(set(ids))}): "
                         "every rank must see the same directory")
    ds.schema, ds.total, ds._mode_of = schema, total, None
    sc = ds.store_comm

    def share():      # (groups may differ in size: agreed)
        if ds.total < sc.size:
            raise ValueError(f"{what}: {ds.total} samples for {sc.size} ranks; every rank "
                             "must own at least one sample")
    _comm.run_agreed(ds.comm, share, what)
    split = _snap.ranges(m, sc.size, _balanced(ds.total, sc.size))[0] if m["vars"] else None
    ds.lo, ds.hi = split[sc.rank], split[sc.rank + 1]
    ds._open_store()
    att = _snap.Attach(d, m, sc.rank, sc.size, bool(box[0]), _balanced(ds.total, sc.size))
    def fill():
        _comm.run_agreed(ds.comm, att.plan, f"{what}: sizes")
        att.init(ds.ddstore)
        _comm.run_agreed(ds.comm, lambda: att.fill(ds.ddstore), f"{what}: reading")
    try:
        ds._fill_or_free(fill)
    finally:
        att.close()
    ds.attach_report = {"bytes_read": att.bytes_read(), "seconds": time.monotonic() - t0,
                        "saved_ranks": m["nranks"]}
    ds._finish()
    return ds


def _balanced(total, n):
    return _snap._split(total, n)


def _peek_name(d):
    """The saved dataset's name (attach's default name): read by every rank
    (the manifest is checked again, collectively, right after)."""
    try:
        desc = _snap.load_manifest(d).get("dataset") or {}
        name = desc.get("name")
        return name if isinstance(name, str) and name else "attached"
    except (OSError, ValueError):
        return "attached"
