"""The method-2 meta file, {name}.meta.json: what a DistDatasetReader in
another job needs to read a DistDataset (its sample structure, fields and
layout), scoped to one core run (namespace, run id, the generation of every
variable's record).  Written by the core job's DistDataset (rank 0 of the
store), read, validated and matched against the records here.
"""

import json
import os
import time

import numpy as np

import pyddstore

from . import env
from . import packing as _pk
from ._ext import ext
from .schema import Schema

FORMAT = "pyddstore.torch.meta"
VERSION = 3          # 2: run-scoped (exchange_ns, run_id, generation);
                           # 3: ragged fields ("axis" in a field's description;
                           #    written only when the dataset has ragged fields)
VERSION_FIXED = 2
VERSION_PACKED = 4   # 4: fixed fields packed into one row ("packed", "offset")
MAX_BYTES = 16 << 20
RECORD_MAX_BYTES = 1 << 30


def remove_meta_file(path, run_id, pid):
    """Remove the meta file at `path` if it is still the one of run `run_id`
    (and only in the process that wrote it: never from a forked child)."""
    if os.getpid() != pid:
        return
    try:
        data = pyddstore._core._file_read(path, MAX_BYTES, "meta file")
        if data is not None and json.loads(data.decode("utf-8")).get("run_id") == run_id:
            os.unlink(path)
    except (OSError, ValueError, AttributeError, pyddstore.DDStoreError):
        pass    # not ours, or unreadable: nothing of ours to remove


def _record_path(hs, var, ns):
    """Method 2's record of `var` (its file name: C ddofi_hs_record_file_name,
    [A-Za-z0-9._-] kept but a leading '.', every other byte as %XX)."""
    return os.path.join(hs, pyddstore._core._handshake_file_name(var, ns))


def meta_file_name(name, ns=""):
    """{name}.meta.json, or {ns}@{name}.meta.json in a namespace (the names
    encoded like the records')."""
    return pyddstore._core._handshake_file_name(name, ns)[:-len(".ddshs")] + ".meta.json"


def read_record(hs, var, ns):
    """The record of `var` (a dict, _handshake_parse) or None when missing."""
    path = _record_path(hs, var, ns)
    data = pyddstore._core._file_read(path, RECORD_MAX_BYTES, "handshake record")
    if data is None:
        return None
    return pyddstore._core._handshake_parse(data, path)


def write_json_atomic(path, obj):
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


def parse_meta(path, data, name):
    """The validated meta dict and its Schema; ValueError naming the file and
    the field otherwise (never a raw KeyError / RecursionError).  The checks
    are the extension's meta_check; Schema and the packed layout check what
    needs numpy (record dtypes)."""
    try:
        meta = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise ValueError(f"{path}: not a meta file: JSON nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{path}: not a meta file: not valid JSON ({e})") from None
    var_of = ext.meta_check(meta, path, name)
    try:
        schema = Schema.from_description(meta["schema"], var_of.__getitem__)
    except RecursionError:
        raise _bad_meta(path, "schema", "is nested too deeply") from None
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
        raise _bad_meta(path, "schema", f"is not a valid sample description "
                        f"({type(e).__name__}: {e})"[:400]) from None
    pk = meta.get(_pk.META_KEY)
    if pk is not None:
        try:
            _pk.RowLayout(pk["var"], [f for f in schema.fields if f.axis is None],
                          pk["row_bytes"])
        except ValueError as e:
            raise _bad_meta(path, "schema", str(e)) from None
    return meta, schema


def _load_meta(hs, name, ns):
    """(path, meta, schema); meta None when there is no meta file (yet).  A
    reader without a namespace takes the one of any namespace when only one
    exists."""
    path = os.path.join(hs, meta_file_name(name, ns))
    # someone else's directory, or one others may write to, is not trusted
    if not pyddstore._core._dir_check(hs, "handshake directory"):
        return path, None, None
    data = pyddstore._core._file_read(path, MAX_BYTES, "meta file")
    if data is None and not ns:
        suffix = "@" + meta_file_name(name)
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
            data = pyddstore._core._file_read(path, MAX_BYTES, "meta file")
    if data is None:
        return path, None, None
    meta, schema = parse_meta(path, data, name)
    return path, meta, schema


def read_meta(hs, name, ns=""):
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
        rec = read_record(hs, var, ns)
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


def join_run(hs, name, ns, n_core):
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
