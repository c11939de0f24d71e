"""PyDDStore: the C store (pyddstore._core.PyDDStore) with what only
Python does around it: snapshots (save, attach; pyddstore/snapshot.py)."""

from . import _core
from . import snapshot as _snap


class PyDDStore(_core.PyDDStore):
    __doc__ = _core.PyDDStore.__doc__
    __slots__ = ()

    def save(self, dir, overwrite=False):
        """Collective.  Every variable's shards into directory `dir` (one
        file per rank, a manifest written last: docs/files.md), for
        PyDDStore.attach / DistDataset.attach in a later job step, at any
        world size.  overwrite: replace a snapshot already there.  Returns
        the manifest (a dict)."""
        return _snap.store_save(self, dir, overwrite)

    @classmethod
    def attach(cls, dir, comm=None, method=None, verify=None, **kwargs):
        """Collective.  A new store over `comm` (PyDDStore's arguments:
        method, handshake_dir, ...) holding every variable of the snapshot
        in `dir`: at the saved world size each rank its saved rows, at any
        other a balanced split of each variable's rows, each rank reading
        only its range.  verify: check the checksums of what is read
        (default DDSTORE_SNAPSHOT_VERIFY, on).  A stale, truncated,
        tampered or foreign snapshot is a ValueError on every rank."""
        if method is not None:
            kwargs["method"] = method
        return _snap.store_attach(lambda: cls(comm, **kwargs), dir, verify)
