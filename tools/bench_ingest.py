#!/usr/bin/env python3
"""Loading a HydraGNN-like ADIOS2 file into the store, and keeping it
(issue 37's numbers; docs/measurements.md "Files to shards").

    .venv/bin/python tools/bench_ingest.py --samples 20000 --ranks 2 --rounds 3

One run, rounds interleaved, every arm on the same file:

  odirect    the file's data read once with O_DIRECT by one process (the disk's
             rate for this file: the local limit)
  ingest     DistDataset.from_adios at --ranks ranks, the page cache of the file
             dropped first (posix_fadvise DONTNEED): cold
  hydragnn   what HydraGNN's AdiosDataset(ddstore=True) does, written from its
             description: each rank reads its slab per key, builds one record per
             sample in a Python loop (tolist -> structured array -> bytes), one add
  mapstyle   a map-style dataset reading each sample through adios2, wrapped in
             DistDataset(ragged=True), on the first --map-samples samples (MB/s
             scaled to the bytes it read)
  attach     ds.save() to /dev/shm once, then DistDataset.attach at --ranks ranks
             (and the time to the first batch of 64)
  other      a snapshot saved by --other-from ranks (ddstore_width) attached by
             each of --other-to world sizes: bytes each rank read / its new shard

The fixture: --samples molecular graphs, 15 keys like HydraGNN's (float64
node, edge and graph fields, int64 edge_index [2, E], uint8 SMILES text),
5-200 atoms, 3 edges per atom, written once by pyddstore.io's writer to
--dir (default out/bench/ingest).  Prints a table and one JSON line.
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(TOP, "python"))
DDRUN = os.path.join(TOP, "tools", "ddrun")
PY = sys.executable
LABEL = "trainset"

NODE_KEYS = {"x": 11, "pos": 3, "forces": 3, "z": 1}          # float64 [n, k]
EDGE_KEYS = {"edge_attr": 1, "edge_shifts": 3}                # float64 [E, k]
GRAPH_KEYS = {"energy": 1, "y": 1, "charge": 1, "spin": 1, "natoms": 1,
              "cell": 9, "pbc": 3}                             # float64 [k] per graph


def fixture(path, n, seed=7):
    """Write the file (vectorised columns; a few seconds per GB)."""
    import pyddstore.io as pio
    rng = np.random.default_rng(seed)
    atoms = rng.integers(5, 201, n).astype(np.int64)
    edges = 3 * atoms
    na, ne = int(atoms.sum()), int(edges.sum())
    cols = {}
    for k, w in NODE_KEYS.items():
        cols[k] = (rng.standard_normal((na, w)), atoms, 0)
    src = rng.integers(0, 5, (2, ne), dtype=np.int64)
    cols["edge_index"] = (src, edges, 1)
    for k, w in EDGE_KEYS.items():
        cols[k] = (rng.standard_normal((ne, w)), edges, 0)
    for k, w in GRAPH_KEYS.items():
        cols[k] = (rng.standard_normal(n * w), np.full(n, w, np.int64), 0)
    slen = rng.integers(5, 60, n).astype(np.int64)
    cols["smiles"] = (rng.integers(65, 90, int(slen.sum())).astype(np.uint8), slen, 0)
    pio.write_adios_columns(path, LABEL, cols, n)


def data_files(path):
    return sorted(os.path.join(path, f) for f in os.listdir(path) if f.startswith("data."))


def drop_cache(path):
    for f in [os.path.join(path, x) for x in os.listdir(path)]:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def odirect(path):
    import mmap
    buf = mmap.mmap(-1, 8 << 20)
    total, t0 = 0, time.perf_counter()
    for f in data_files(path):
        fd = os.open(f, os.O_RDONLY | os.O_DIRECT)
        try:
            while True:
                k = os.readv(fd, [buf])
                total += k
                if k < len(buf):
                    break
        finally:
            os.close(fd)
    dt = time.perf_counter() - t0
    return {"bytes": total, "seconds": dt, "gb_s": total / dt / 1e9}


# ------------------------------------------------------- the rank programs --
def _comm():
    from mpi4py import MPI
    return MPI.COMM_WORLD


def _rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rank_ingest(path, out):
    from pyddstore.torch import DistDataset
    c = _comm()
    if c.rank == 0:
        drop_cache(path)
    c.Barrier()
    t0 = time.perf_counter()
    ds = DistDataset.from_adios(path, LABEL, c)
    dt = time.perf_counter() - t0
    shard = ds.ingest_report["bytes"][c.rank]
    rss = c.gather(_rss_mb(), root=0)
    times = c.gather(dt, root=0)
    ds.free()
    if c.rank == 0:
        b = sum(ds.ingest_report["bytes"])
        json.dump({"bytes": b, "seconds": max(times), "gb_s": b / max(times) / 1e9,
                   "rss_mb": rss, "shard_mb": shard / 2**20}, open(out, "w"))


def _slab(src, key, lo, hi):
    c = src.counts(key, lo, hi)
    start = int(src.counts(key, 0, lo).sum()) if lo else 0
    n = int(c.sum())
    s = list(key.shape)
    s[key.dim] = n
    a = np.empty(s, dtype=key.dtype)
    if n:
        src.read(key, start, n, a)
    return np.moveaxis(a, key.dim, 0), c


def rank_hydragnn(path, out):
    """HydraGNN's AdiosDataset(ddstore=True) path, from its description:
    slab per key, a Python loop building one record per sample, one add."""
    import io
    import pyddstore
    from pyddstore.io import AdiosSource
    c = _comm()
    if c.rank == 0:
        drop_cache(path)
    c.Barrier()
    t0 = time.perf_counter()
    src = AdiosSource(path, LABEL)
    n = src.total
    lo, hi = c.rank * n // c.size, (c.rank + 1) * n // c.size
    slabs = {k.key: _slab(src, k, lo, hi) for k in src.keys}
    src.close()
    recs, nbytes = [], 0
    pos = {k: 0 for k in slabs}
    for i in range(hi - lo):                 # one record per sample
        fields = []
        for k, (a, cnt) in slabs.items():
            m = int(cnt[i])
            v = a[pos[k]:pos[k] + m]
            pos[k] += m
            fields.append(np.array(v.tolist(), dtype=a.dtype))
        buf = io.BytesIO()
        np.savez(buf, *fields)
        r = np.frombuffer(buf.getvalue(), dtype=np.uint8)
        nbytes += sum(f.nbytes for f in fields)
        recs.append(r)
    flat = np.concatenate(recs)
    s = pyddstore.PyDDStore(c)
    s.add("records", flat)
    dt = time.perf_counter() - t0
    times = c.gather(dt, root=0)
    tot = c.reduce(nbytes, root=0)
    s.free()
    if c.rank == 0:
        json.dump({"bytes": tot, "seconds": max(times), "gb_s": tot / max(times) / 1e9},
                  open(out, "w"))


class _PerSample:
    """A map-style dataset reading each sample through adios2."""

    def __init__(self, path, n):
        from pyddstore.io import AdiosSource
        self.src = AdiosSource(path, LABEL)
        self.n = n
        self.starts = {}
        for k in self.src.keys:
            cnt = self.src.counts(k, 0, n)
            self.starts[k.key] = (np.concatenate(([0], np.cumsum(cnt))), k)
        self.nbytes = 0

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import torch
        out = {}
        for name, (st, k) in self.starts.items():
            a, b = int(st[i]), int(st[i + 1])
            s = list(k.shape)
            s[k.dim] = b - a
            v = np.empty(s, dtype=k.dtype)
            if b > a:
                self.src.read(k, a, b - a, v)
            self.nbytes += v.nbytes
            out[name] = torch.from_numpy(v)
        return out


def rank_mapstyle(path, n, out):
    from pyddstore.torch import DistDataset
    c = _comm()
    if c.rank == 0:
        drop_cache(path)
    c.Barrier()
    src = _PerSample(path, n)
    t0 = time.perf_counter()
    ds = DistDataset(src, "map", c, ragged=True)
    dt = time.perf_counter() - t0
    times = c.gather(dt, root=0)
    tot = c.reduce(src.nbytes, root=0)
    ds.free()
    if c.rank == 0:
        json.dump({"bytes": tot, "seconds": max(times), "gb_s": tot / max(times) / 1e9},
                  open(out, "w"))


def rank_save(path, snap, width):
    from pyddstore.torch import DistDataset
    c = _comm()
    ds = DistDataset.from_adios(path, LABEL, c, ddstore_width=width)
    ds.save(snap, overwrite=True)
    ds.free()


def rank_attach(snap, out, width=None):
    import torch  # noqa: F401
    from pyddstore.torch import DistDataset, ThreadDataLoader
    c = _comm()
    c.Barrier()
    t0 = time.perf_counter()
    ds = DistDataset.attach(snap, c, ddstore_width=width)
    dt = time.perf_counter() - t0
    it = iter(ThreadDataLoader(ds, batch_size=64, num_workers=1))
    next(it)
    first = time.perf_counter() - t0
    del it
    rep = ds.attach_report
    shard = 0
    for v in ds._vars_of(ds.schema.fields):
        rows, index = ds.ddstore._local_view(v)
        shard += len(rows) + (0 if index is None else len(index))
        del rows, index
    every = c.gather((dt, first, rep["bytes_read"], shard), root=0)
    ds.free()
    if c.rank == 0:
        json.dump({"seconds": max(e[0] for e in every), "first_batch_s": max(e[1] for e in every),
                   "read_over_shard": [e[2] / e[3] for e in every],
                   "bytes": sum(e[3] for e in every)}, open(out, "w"))


# ---------------------------------------------------------------- driver --
def run_ranks(n, args, timeout=3600):
    env = dict(os.environ, DDSTORE_PROGRESS="0")
    r = subprocess.run([DDRUN, "-n", str(n), "--timeout", str(timeout), "--", PY,
                        os.path.abspath(__file__)] + args, env=env, capture_output=True,
                       text=True)
    if r.returncode:
        raise RuntimeError(f"{' '.join(args)}: exit {r.returncode}\n{r.stderr[-3000:]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--map-samples", type=int, default=500)
    ap.add_argument("--other-from", type=int, default=4)
    ap.add_argument("--other-to", default="2,3,5")
    ap.add_argument("--dir", default=os.path.join(TOP, "out", "bench", "ingest"))
    ap.add_argument("--snap", default=f"/dev/shm/ddstore-bench-ingest-{os.getuid()}")
    ap.add_argument("--arms", default="odirect,ingest,hydragnn,mapstyle,attach,other")
    ap.add_argument("--rank", nargs="+", help=argparse.SUPPRESS)   # a rank program
    a = ap.parse_args()
    if a.rank:
        kind, *rest = a.rank
        {"ingest": rank_ingest, "hydragnn": rank_hydragnn, "save": rank_save,
         "attach": rank_attach, "mapstyle": rank_mapstyle}[kind](
            *[int(x) if x.isdigit() else (None if x == "-" else x) for x in rest])
        return
    os.makedirs(a.dir, exist_ok=True)
    path = os.path.join(a.dir, f"graphs-{a.samples}.bp")
    if not os.path.exists(os.path.join(path, "md.idx")):
        t0 = time.perf_counter()
        fixture(path, a.samples)
        print(f"fixture {path}: {sum(map(os.path.getsize, data_files(path))) / 1e9:.2f} GB "
              f"in {time.perf_counter() - t0:.0f} s", flush=True)
    arms = a.arms.split(",")
    snaps = {}
    if "attach" in arms:
        snaps["same"] = a.snap + "-same"
        run_ranks(a.ranks, ["--rank", "save", path, snaps["same"], "-"])
    others = [int(x) for x in a.other_to.split(",") if x]
    if "other" in arms:
        snaps["other"] = a.snap + "-other"
        run_ranks(max(others + [a.other_from]),
                  ["--rank", "save", path, snaps["other"], str(a.other_from)])
    res = {k: [] for k in arms}
    tmp = os.path.join(a.dir, "result.json")
    for r in range(a.rounds):
        for arm in arms:
            if arm == "odirect":
                res[arm].append(odirect(path))
                continue
            if arm == "ingest":
                run_ranks(a.ranks, ["--rank", "ingest", path, tmp])
            elif arm == "hydragnn":
                run_ranks(a.ranks, ["--rank", "hydragnn", path, tmp])
            elif arm == "mapstyle":
                run_ranks(a.ranks, ["--rank", "mapstyle", path, str(a.map_samples), tmp])
            elif arm == "attach":
                run_ranks(a.ranks, ["--rank", "attach", snaps["same"], tmp, "-"])
            elif arm == "other":
                row = {}
                for w in others:
                    run_ranks(w, ["--rank", "attach", snaps["other"], tmp, "-"])
                    row[w] = json.load(open(tmp))
                res[arm].append(row)
                continue
            res[arm].append(json.load(open(tmp)))
        print(f"round {r + 1}/{a.rounds} done", flush=True)
    for s in snaps.values():
        shutil.rmtree(s, ignore_errors=True)
    report(a, path, res)


def _med(xs):
    return statistics.median(xs), min(xs), max(xs)


def report(a, path, res):
    size = sum(map(os.path.getsize, data_files(path)))
    print(f"\nfile {path}: {a.samples} graphs, {size / 1e9:.2f} GB of data; "
          f"{a.ranks} ranks, {a.rounds} rounds interleaved\n")
    rows = []
    od = [x["gb_s"] for x in res.get("odirect", [])]
    if od:
        rows.append(("O_DIRECT read, 1 process", "%.2f GB/s (%.2f-%.2f)" % _med(od), "1"))
    for arm, what in (("ingest", "from_adios (cold)"), ("hydragnn", "HydraGNN's path (a)"),
                      ("mapstyle", f"map-style via adios2 (b), {a.map_samples} samples")):
        if arm in res:
            g = [x["gb_s"] for x in res[arm]]
            ratio = "%.2f" % statistics.median([x / y for x, y in zip(g, od)]) if od else ""
            rows.append((what, "%.3f GB/s (%.3f-%.3f)" % _med(g), ratio))
    if "ingest" in res:
        for other in ("hydragnn", "mapstyle"):
            if other in res:
                q = [x["gb_s"] / y["gb_s"] for x, y in zip(res["ingest"], res[other])]
                rows.append((f"from_adios / {other}", "%.1fx (%.1f-%.1f)" % _med(q), ""))
        rss = [max(x["rss_mb"]) / max(1.0, x["shard_mb"]) for x in res["ingest"]]
        extra = [max(x["rss_mb"]) - x["shard_mb"] for x in res["ingest"]]
        rows.append(("peak RSS / shard (ingest)", "%.2f (%.2f-%.2f)" % _med(rss),
                     "RSS - shard %.0f MiB" % statistics.median(extra)))
    if "attach" in res and "ingest" in res:
        q = [x["seconds"] / y["seconds"] for x, y in zip(res["attach"], res["ingest"])]
        rows.append(("attach (same size, /dev/shm) / cold ingest", "%.3f (%.3f-%.3f)" % _med(q),
                     ""))
        fb = [x["first_batch_s"] for x in res["attach"]]
        rows.append(("attach: first batch after (s)", "%.2f (%.2f-%.2f)" % _med(fb), ""))
    if "other" in res:
        for w in sorted(res["other"][0]):
            q = [max(r[w]["read_over_shard"]) for r in res["other"]]
            rows.append((f"attach {a.other_from} -> {w} ranks: bytes read / shard (max rank)",
                         "%.3f (%.3f-%.3f)" % _med(q), ""))
    w0 = max(len(r[0]) for r in rows)
    for r in rows:
        print(f"{r[0]:<{w0}}  {r[1]:<28} {r[2]}")
    print(json.dumps({"samples": a.samples, "ranks": a.ranks, "file_bytes": size,
                      "results": res}))


if __name__ == "__main__":
    main()
