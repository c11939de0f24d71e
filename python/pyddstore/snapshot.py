"""Snapshots: a store's shards kept in files between job steps, attached
again at any world size (docs/files.md, "Snapshots").

A snapshot is a directory:

``rank-NNNNN.ddsnap``
    one file per rank of the store that saved it: a 64 KiB header chunk
    (magic, the snapshot's id, rank, ranks), then every variable's sections,
    each starting on a 64 KiB boundary: a ragged variable's index (the
    rank's local_rows + 1 int64 element-row prefix sums), then its rows
    (element rows; a fixed variable's rows).
``manifest.json``
    written last, atomically (temporary file, fsync, rename, directory
    fsync): format and version, the id, the ranks, every variable (dtype,
    itemsize, disp, ragged, rows and element rows per rank), every file
    (size, where each variable's sections start, a CRC-32 per 64 KiB chunk)
    and, for a DistDataset, its schema.

Attaching reads each rank's range of every variable straight into the
store's shards (``PyDDStore._local_view``): at the same world size its own
file's sections, at any other only the bytes of its new range (plus at most
one chunk before and after each piece, for the checksums).  Every chunk a
rank reads is checked against the manifest (``DDSTORE_SNAPSHOT_VERIFY=0``:
sizes, headers and ids only; ``ddstore-snapshot verify`` checks every
chunk).  Anything stale, truncated, tampered with or foreign is a
ValueError naming the file, on every rank.

The collective steps go through `coll`, an object with ``rank``, ``size``,
``allgather(obj, what)`` and ``barrier(what)`` over the store's ranks
(pyddstore.torch's Comm), and errors through ``agree(exc, what)``.
"""

import json
import os
import secrets
import struct
import sys
import time
import zlib

import numpy as np

FORMAT = "ddstore.snapshot"
VERSION = 1
CHUNK = 64 << 10                  # checksum and alignment unit
MAGIC = b"DDSNAP\x00\x01"
MANIFEST = "manifest.json"
_HEAD = struct.Struct("<8s32sII")  # magic, id (hex), rank, ranks
MAX_MANIFEST = 256 << 20

__all__ = ["save", "load_manifest", "Attach", "verify", "file_name", "FORMAT", "VERSION"]


def file_name(rank):
    return f"rank-{rank:05d}.ddsnap"


def _up(n):
    return (n + CHUNK - 1) // CHUNK * CHUNK


def _crcs(mv, out):
    """CRC-32 of each CHUNK of `mv` (its length a multiple of CHUNK, or the
    last chunk padded with zeros) appended to out."""
    n = len(mv)
    for a in range(0, n, CHUNK):
        piece = mv[a:a + CHUNK]
        c = zlib.crc32(piece)
        if len(piece) < CHUNK:
            c = zlib.crc32(bytes(CHUNK - len(piece)), c)
        out.append(c)


def _write_all(fd, mv):
    while len(mv):
        k = os.write(fd, mv)
        mv = mv[k:]


# ------------------------------------------------------------------- save --
def _save_rank(store, d, sid, rank, nranks, names):
    """Write this rank's file; returns its manifest entry and the
    variables' local descriptions."""
    path = os.path.join(d, file_name(rank))
    tmp = path + f".tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    crcs, sections, local = [], {}, []
    try:
        head = bytearray(CHUNK)
        _HEAD.pack_into(head, 0, MAGIC, sid.encode(), rank, nranks)
        _write_all(fd, memoryview(head))
        _crcs(memoryview(head), crcs)
        off = CHUNK
        for name in names:
            full = store.info_full(name)
            rows, index = store._local_view(name)
            parts = []
            if index is not None:
                parts.append(("index", index))
            parts.append(("rows", rows))
            sec = {}
            for what, mv in parts:
                sec[what] = off
                _write_all(fd, mv)
                pad = _up(len(mv)) - len(mv)
                if pad:
                    _write_all(fd, memoryview(bytes(pad)))
                _crcs(mv, crcs)
                off += len(mv) + pad
            sections[name] = sec
            local.append([int(full["local_rows"]), int(full["local_elems"])])
            del rows, index, parts
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    os.close(fd)
    os.replace(tmp, path)
    return {"name": file_name(rank), "bytes": off, "sections": sections,
            "crc32": crcs}, local


def save(store, d, coll, agree, names=None, dataset=None, overwrite=False):
    """Collective over coll: snapshot `names` (default: every variable of
    the store) into directory `d`.  dataset: a JSON-able description added
    to the manifest (DistDataset's schema).  Returns the manifest."""
    d = os.fspath(d)
    names = list(store.names()) if names is None else list(names)

    def prepare():
        if coll.rank == 0:
            os.makedirs(d, mode=0o700, exist_ok=True)
            m = os.path.join(d, MANIFEST)
            if os.path.exists(m):
                if not overwrite:
                    raise FileExistsError(f"{d}: holds a snapshot already ({MANIFEST}); "
                                          "remove it (ddstore-snapshot rm) or pass "
                                          "overwrite=True")
                os.unlink(m)      # a reader never meets a manifest without its files
                _fsync_dir(d)
            return secrets.token_hex(16)
        return None
    err, sid = None, None
    try:
        sid = prepare()
    except Exception as e:  # noqa: BLE001 - agreed below
        err = e
    agree(err, "snapshot: preparing the directory")
    sid = coll.allgather(sid, "snapshot: id")[0]
    coll.barrier("snapshot: directory ready")
    entry = local = None
    err = None
    try:
        descs = [_describe(store, n) for n in names]
        entry, local = _save_rank(store, d, sid, coll.rank, coll.size, names)
    except Exception as e:  # noqa: BLE001 - agreed below
        err = e
    agree(err, "snapshot: writing this rank's file")
    every = coll.allgather([entry, local], "snapshot: files")
    manifest = {
        "format": FORMAT, "version": VERSION, "id": sid, "created": time.time(),
        "nranks": coll.size, "chunk": CHUNK,
        "vars": [dict(desc, rows=[e[1][j][0] for e in every],
                      elems=[e[1][j][1] for e in every])
                 for j, desc in enumerate(descs)],
        "files": [e[0] for e in every],
        "dataset": dataset,
    }
    err = None
    try:
        if coll.rank == 0:
            _publish(d, MANIFEST, json.dumps(manifest, separators=(",", ":")).encode())
    except Exception as e:  # noqa: BLE001 - agreed below
        err = e
    agree(err, "snapshot: writing the manifest")
    return manifest


def _describe(store, name):
    full = store.info_full(name)
    return {"name": name, "dtype": str(full["dtype"]), "itemsize": int(full["itemsize"]),
            "disp": int(full["disp"]), "ragged": bool(full["ragged"])}


def _fsync_dir(d):
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _publish(d, name, data):
    tmp = os.path.join(d, f".{name}.tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        _write_all(fd, memoryview(data))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, os.path.join(d, name))
    _fsync_dir(d)


# ------------------------------------------------------------------- read --
def _bad(d, why):
    return ValueError(f"snapshot {d}: {why}")


def load_manifest(d):
    """The validated manifest of snapshot directory `d` (ValueError naming
    what is wrong; FileNotFoundError when there is none)."""
    d = os.fspath(d)
    path = os.path.join(d, MANIFEST)
    with open(path, "rb") as f:
        data = f.read(MAX_MANIFEST + 1)
    if len(data) > MAX_MANIFEST:
        raise _bad(d, f"{MANIFEST} is larger than {MAX_MANIFEST} bytes")
    try:
        m = json.loads(data)
    except (UnicodeDecodeError, ValueError) as e:
        raise _bad(d, f"{MANIFEST} is not valid JSON ({e})") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise _bad(d, f"{MANIFEST} is not a ddstore snapshot manifest")
    if m.get("version") != VERSION:
        raise _bad(d, f"{MANIFEST} is of format version {m.get('version')!r}; this "
                   f"pyddstore reads version {VERSION}")
    try:
        n = int(m["nranks"])
        ok = (n >= 1 and len(m["files"]) == n and m["chunk"] == CHUNK
              and isinstance(m["id"], str) and len(m["id"]) == 32
              and all(len(v["rows"]) == n and len(v["elems"]) == n for v in m["vars"])
              and all(f["name"] == file_name(r) and
                      len(f["crc32"]) == f["bytes"] // CHUNK and f["bytes"] % CHUNK == 0
                      for r, f in enumerate(m["files"])))
    except (KeyError, TypeError, ValueError) as e:
        raise _bad(d, f"{MANIFEST} is damaged ({type(e).__name__}: {e})") from None
    if not ok:
        raise _bad(d, f"{MANIFEST} is damaged (its ranks, files and variables do not agree)")
    return m


class _File:
    """One rank file of a snapshot, opened for reading, its header checked."""

    def __init__(self, d, m, r, verify):
        self.d, self.entry, self.verify = d, m["files"][r], verify
        self.path = os.path.join(d, self.entry["name"])
        try:
            self.fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            raise _bad(d, f"{self.entry['name']}: {e.strerror}") from None
        size = os.fstat(self.fd).st_size
        if size != self.entry["bytes"]:
            self.close()
            raise _bad(d, f"{self.entry['name']} is {size} bytes, the manifest says "
                       f"{self.entry['bytes']} (truncated, or from another snapshot)")
        head = os.pread(self.fd, _HEAD.size, 0)
        magic, sid, rank, ranks = _HEAD.unpack(head)
        if magic != MAGIC or sid.decode(errors="replace") != m["id"] or rank != r or \
                ranks != m["nranks"]:
            self.close()
            raise _bad(d, f"{self.entry['name']} belongs to another snapshot (id "
                       f"{sid.decode(errors='replace')!r}, rank {rank} of {ranks}; the "
                       f"manifest: {m['id']!r}, rank {r} of {m['nranks']})")
        self.bytes_read = 0

    def close(self):
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def _pread_into(self, mv, off):
        got = 0
        while got < len(mv):
            k = os.preadv(self.fd, [mv[got:]], off + got)
            if k <= 0:
                raise _bad(self.d, f"{self.entry['name']}: short read at {off + got}")
            got += k
        self.bytes_read += got

    def read_into(self, mv, off):
        """Bytes [off, off+len(mv)) into mv, each chunk they touch checked
        (the parts of boundary chunks outside the range read into a small
        buffer)."""
        n = len(mv)
        if n == 0:
            return
        self._pread_into(mv, off)
        if not self.verify:
            return
        crcs = self.entry["crc32"]
        c0, c1 = off // CHUNK, (off + n - 1) // CHUNK
        for c in range(c0, c1 + 1):
            a, b = c * CHUNK, (c + 1) * CHUNK
            lo, hi = max(a, off), min(b, off + n)
            crc = 0
            if lo > a:
                pre = bytearray(lo - a)
                self._pread_into(memoryview(pre), a)
                crc = zlib.crc32(pre, crc)
            crc = zlib.crc32(mv[lo - off:hi - off], crc)
            if hi < b:
                post = bytearray(b - hi)
                self._pread_into(memoryview(post), hi)
                crc = zlib.crc32(post, crc)
            if crc != crcs[c]:
                raise _bad(self.d, f"{self.entry['name']}: chunk {c} (bytes {a}..{b}) "
                           "does not match its checksum: the file was changed or damaged")


def _split(total, nranks):
    base, extra = divmod(total, nranks)
    out, lo = [0], 0
    for r in range(nranks):
        lo += base + (1 if r < extra else 0)
        out.append(lo)
    return out


def ranges(m, nranks, sample_split=None):
    """Every variable's rows per rank of a world of `nranks`: the saved
    distribution at the same world size, else `sample_split` (offsets,
    nranks + 1) or a balanced split of each variable."""
    out = []
    for v in m["vars"]:
        if nranks == m["nranks"]:
            offs = [0]
            for r in v["rows"]:
                offs.append(offs[-1] + r)
        elif sample_split is not None:
            offs = list(sample_split)
        else:
            offs = _split(sum(v["rows"]), nranks)
        out.append(offs)
    return out


def _dt(v):
    return None if v["dtype"] == "raw" else v["dtype"]


class Attach:
    """Attaching a snapshot's variables to a store, in three steps so that
    a rank's local error never leaves the others in a collective call:
    plan() (local: the ragged variables' sizes of this rank's range, read
    from the files), init() (collective: every shard sized), fill()
    (local: the rows read into the shards).  The caller agrees on the
    errors of the local steps (and frees the store on failure)."""

    def __init__(self, d, m, rank, nranks, verify=True, sample_split=None):
        self.d, self.m, self.rank = os.fspath(d), m, rank
        self.verify = verify
        self.per = ranges(m, nranks, sample_split)
        self.files = {}
        self.plan_ = []

    def _f(self, r):
        if r not in self.files:
            self.files[r] = _File(self.d, self.m, r, self.verify)
        return self.files[r]

    @staticmethod
    def _pieces(v, lo, hi):
        """(old rank, first local row, last local row + 1) covering [lo, hi)."""
        o = 0
        for r, n in enumerate(v["rows"]):
            a, b = max(lo, o), min(hi, o + n)
            if a < b:
                yield r, a - o, b - o
            o += n

    def plan(self):
        for v, offs in zip(self.m["vars"], self.per):
            lo, hi = offs[self.rank], offs[self.rank + 1]
            rb = v["disp"] * v["itemsize"]
            if not v["ragged"]:
                self.plan_.append((v, hi - lo, None, [(r, a * rb, (b - a) * rb) for r, a, b in
                                                      self._pieces(v, lo, hi)]))
                continue
            lengths, parts = [], []
            for r, a, b in self._pieces(v, lo, hi):
                idx = np.empty(b - a + 1, dtype=np.int64)
                sec = self.m["files"][r]["sections"][v["name"]]
                self._f(r).read_into(memoryview(idx).cast("B"), sec["index"] + 8 * a)
                ln = np.diff(idx)
                if idx[0] < 0 or (ln < 0).any() or idx[-1] > v["elems"][r]:
                    raise _bad(self.d, f"{file_name(r)}: the index of '{v['name']}' is "
                               "damaged")
                lengths.append(ln)
                parts.append((r, int(idx[0]) * rb, int(idx[-1] - idx[0]) * rb))
            ln = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
            self.plan_.append((v, hi - lo, ln, parts))

    def init(self, store):
        """Collective (the store agrees on its own errors)."""
        for v, n, ln, _ in self.plan_:
            if ln is None:
                store.init(v["name"], n, v["disp"], v["itemsize"], _dt(v))
            else:
                store.init_ragged(v["name"], ln, v["disp"], v["itemsize"], _dt(v))

    def fill(self, store):
        for v, _, _, parts in self.plan_:
            rows, _ = store._local_view(v["name"])
            at = 0
            for r, off, n in parts:
                sec = self.m["files"][r]["sections"][v["name"]]
                self._f(r).read_into(rows[at:at + n], sec["rows"] + off)
                at += n
            if at != len(rows):
                raise _bad(self.d, f"'{v['name']}': {at} bytes read for a shard of "
                           f"{len(rows)}")
            del rows
        return self.bytes_read()

    def bytes_read(self):
        return sum(x.bytes_read for x in self.files.values())

    def close(self):
        for x in self.files.values():
            x.close()


def verify(d):
    """Check every file of snapshot `d` against its manifest (sizes, headers,
    every chunk's checksum).  Returns the manifest; ValueError otherwise."""
    m = load_manifest(d)
    for r in range(m["nranks"]):
        x = _File(d, m, r, True)
        try:
            buf = bytearray(min(64 << 20, m["files"][r]["bytes"]))
            off = 0
            while off < m["files"][r]["bytes"]:
                n = min(len(buf), m["files"][r]["bytes"] - off)
                x.read_into(memoryview(buf)[:n], off)
                off += n
        finally:
            x.close()
    return m


# ------------------------------------------------------- a store's ranks --
class _Mover:
    """The store's communicator as a byte mover (_core.Collective's)."""

    name = "store"

    def __init__(self, store):
        self.store, self.rank, self.size = store, store.rank, store.size

    def allgather_bytes(self, b):
        return self.store._allgather_bytes(b)

    def barrier(self):
        self.store._barrier()


class StoreComm:
    """The collective steps around a PyDDStore (save, attach) over its own
    communicator: allgather / barrier (core's wire codec) and agree."""

    def __init__(self, store):
        from pyddstore import _core
        self._core = _core
        self.store, self.rank, self.size = store, store.rank, store.size
        self._coll = None

    def collective(self):
        if self._coll is None:
            self._coll = self._core.Collective(_Mover(self.store))
        return self._coll

    def allgather(self, obj, what="allgather"):
        if self.size == 1:
            self._core.wire_encode(obj, what)
            return [obj]
        return self.collective().allgather(obj, what)

    def barrier(self, what="barrier"):
        if self.size > 1:
            self.collective().barrier(what)

    def agree(self, exc, what=""):
        self._core.agree(self, exc, what)

    def run_agreed(self, fn, what=""):
        return self._core.run_agreed(self, fn, what)


def store_save(store, d, overwrite=False):
    """PyDDStore.save: every variable of the store (collective)."""
    c = StoreComm(store)
    return save(store, d, c, c.agree, overwrite=overwrite)


def store_attach(make_store, d, verify=None):
    """PyDDStore.attach: a store from make_store() (collective) with every
    variable of snapshot `d`, this rank's range of each read from the
    files (the saved distribution at the saved world size, else balanced)."""
    store = make_store()
    c = StoreComm(store)
    att = None
    try:
        if verify is None:     # (a bad value: ValueError, on every rank)
            from . import _env
            verify = c.run_agreed(_env.snapshot_verify, "attach: settings")
        m = c.run_agreed(lambda: load_manifest(d), f"PyDDStore.attach({str(d)!r})")
        ids = c.allgather(m["id"], "attach: id")
        if any(i != ids[0] for i in ids):
            raise ValueError(f"PyDDStore.attach({str(d)!r}): the ranks read different "
                             f"snapshots (ids {sorted(set(ids))})")
        att = Attach(d, m, store.rank, store.size, verify)
        c.run_agreed(att.plan, "attach: sizes")
        att.init(store)
        c.run_agreed(lambda: att.fill(store), "attach: reading")
    except BaseException:
        try:
            store.free()
        except Exception:  # noqa: BLE001 - the original error matters
            pass
        raise
    finally:
        if att is not None:
            att.close()
    return store


# --------------------------------------------------------------- the CLI --
def _size(n):
    for u in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or u == "TiB":
            return f"{n:.0f} {u}" if u == "B" else f"{n:.1f} {u}"
        n /= 1024


def _found(paths):
    """Snapshot directories under `paths` (a snapshot, or a directory of
    them one level down)."""
    out = []
    for p in paths:
        if os.path.isfile(os.path.join(p, MANIFEST)) or any(
                n.startswith("rank-") and n.endswith(".ddsnap") for n in _ls(p)):
            out.append(p)
        else:
            out += sorted(os.path.join(p, n) for n in _ls(p)
                          if os.path.isfile(os.path.join(p, n, MANIFEST)))
    return out


def _ls(p):
    try:
        return os.listdir(p)
    except OSError:
        return []


def _describe_line(p):
    try:
        m = load_manifest(p)
    except FileNotFoundError:
        return f"{p}: not a complete snapshot (no {MANIFEST}: interrupted, or being written)"
    except ValueError as e:
        return str(e)
    ds = m.get("dataset") or {}
    what = (f"DistDataset '{ds.get('name')}', {ds.get('total')} samples" if ds else
            f"{len(m['vars'])} variables")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(m["created"]))
    size = sum(f["bytes"] for f in m["files"])
    return (f"{p}: {what}, saved by {m['nranks']} ranks at {when}, {_size(size)} in "
            f"{m['nranks']} files, id {m['id'][:8]}")


def _run(argv=None):
    """ddstore-snapshot ls|verify|rm DIR...: list, check, remove snapshots."""
    import argparse
    ap = argparse.ArgumentParser(
        prog="ddstore-snapshot",
        description="List, check or remove ddstore snapshots (ds.save / PyDDStore.save "
                    "directories; docs/files.md).")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p_ls = sub.add_parser("ls", help="describe the snapshots in DIR (a snapshot, or a "
                          "directory of them)")
    p_ls.add_argument("dirs", nargs="+", metavar="DIR")
    p_v = sub.add_parser("verify", help="check every file and chunk of each snapshot "
                         "against its manifest; exit 1 if any fails")
    p_v.add_argument("dirs", nargs="+", metavar="DIR")
    p_rm = sub.add_parser("rm", help="remove snapshots (the manifest first, so that a "
                          "half-removed snapshot is never taken for a whole one)")
    p_rm.add_argument("dirs", nargs="+", metavar="DIR")
    a = ap.parse_args(argv)
    rc = 0
    if a.cmd == "ls":
        found = _found(a.dirs)
        if not found:
            print(f"ddstore-snapshot: no snapshot in {' '.join(a.dirs)}", file=sys.stderr)
            return 1
        for p in found:
            print(_describe_line(p))
    elif a.cmd == "verify":
        for p in a.dirs:
            try:
                m = verify(p)
                print(f"{p}: ok ({m['nranks']} files, "
                      f"{sum(len(f['crc32']) for f in m['files'])} chunks checked)")
            except (OSError, ValueError) as e:
                print(f"{p}: FAILED: {e}", file=sys.stderr)
                rc = 1
    else:
        for p in a.dirs:
            names = _ls(p)
            if MANIFEST not in names and not any(n.endswith(".ddsnap") for n in names):
                print(f"ddstore-snapshot: {p} is not a snapshot: left alone", file=sys.stderr)
                rc = 1
                continue
            if MANIFEST in names:
                os.unlink(os.path.join(p, MANIFEST))
                _fsync_dir(p)
            for n in names:
                if n.endswith(".ddsnap") or (n.startswith(".") and ".tmp" in n) or \
                        ".ddsnap.tmp" in n:
                    os.unlink(os.path.join(p, n))
            try:
                os.rmdir(p)
            except OSError:
                print(f"ddstore-snapshot: removed the snapshot in {p}; other files there "
                      "were left", file=sys.stderr)
            else:
                print(f"removed {p}")
    return rc


if __name__ == "__main__":
    sys.exit(_run())
