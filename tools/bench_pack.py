#!/usr/bin/env python3
"""Packed samples vs one variable per field (DistDataset(pack_fields=True)):
reads per batch and time per batch, methods 0 and 1.

    tools/ddrun -n 2 -- .venv/bin/python tools/bench_pack.py [--batches 200]
        [--rounds 4] [--batch 128] [--per-rank 4096] [--methods 0,1]
        [--samples hydragnn,large] [--json out/bench_pack.json]

Samples (dicts, fixed shapes):
  hydragnn  6 small fields of HydraGNN-like graph-level data: x float32 (16,),
            pos float32 (3,), y float64 (1,), edge_attr float16 (8,),
            natoms int64 (), label int32 (4,)  (row 128 B packed)
  large     4 fields with one large: img float32 (64, 64), mask uint8 (64, 64),
            y float32 (10,), id int64  (row ~20 KiB packed)

For every method (--methods; default DDSTORE_METHOD when set, else 0 and 1)
and sample, a packed and a per-field DistDataset of the same source are made;
then --rounds rounds, each timing --batches batches of --batch random samples
(the same indices for both) through the direct-collate path (the
ThreadDataLoader hot path, dataset._collate), packed and per-field
interleaved A B A B.  Per batch: the planned reads (get_profile "calls"),
the remote reads posted ("reads") and the time (median over the batches of
all rounds; and per round, to see drift).

Every rank measures; rank 0 writes one JSON document (commit, settings, load
average before and after, per-rank results) to --json and a summary to
stdout.  The reads per batch do not depend on the machine's load; times do:
take them on a quiet machine (the load average is recorded with them).
A program, not a test.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(TOP, "python"))

SAMPLES = {
    "hydragnn": [("x", "float32", (16,)), ("pos", "float32", (3,)), ("y", "float64", (1,)),
                 ("edge_attr", "float16", (8,)), ("natoms", "int64", ()),
                 ("label", "int32", (4,))],
    "large": [("img", "float32", (64, 64)), ("mask", "uint8", (64, 64)),
              ("y", "float32", (10,)), ("id", "int64", ())],
}


class Source:
    """A map-style dataset of dict samples with the fields of `spec`."""

    def __init__(self, spec, n):
        self.spec, self.n = spec, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import torch
        out = {}
        for k, (key, dt, shape) in enumerate(self.spec):
            a = (np.arange(int(np.prod(shape)) or 1) + i * 7 + k).reshape(shape)
            out[key] = torch.from_numpy(np.asarray(a).astype(dt))
        return out


def _commit():
    try:
        rev = subprocess.run(["git", "-C", TOP, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", TOP, "status", "--porcelain", "-uno"],
                               capture_output=True, text=True).stdout.strip()
        return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _time_batches(ds, batches):
    """(per-batch seconds, calls, remote reads) of the direct collate of
    `batches` on ds."""
    p0 = ds.get_profile()
    ts = []
    for b in batches:
        t0 = time.perf_counter()
        ds._collate(b)
        ts.append(time.perf_counter() - t0)
    p1 = ds.get_profile()
    return ts, p1["calls"] - p0["calls"], p1["reads"] - p0["reads"]


def run(a, comm):
    import torch  # noqa: F401
    from pyddstore.torch import DistDataset
    rank, size = comm.Get_rank(), comm.Get_size()
    hs = comm.bcast(tempfile.mkdtemp(prefix="bench_pack_") if rank == 0 else None)
    out = []
    for method in a.methods:
        for sname in a.samples:
            spec = SAMPLES[sname]
            n = a.per_rank * size
            kw = dict(method=method, handshake_dir=hs)
            dss = {"packed": DistDataset(Source(spec, n), f"bp{method}{sname}p", comm,
                                         pack_fields=True, **kw),
                   "per_field": DistDataset(Source(spec, n), f"bp{method}{sname}f", comm, **kw)}
            rng = np.random.default_rng(1000 + rank)
            for ds in dss.values():                      # warm up: registrations, caches
                _time_batches(ds, [rng.integers(0, n, a.batch) for _ in range(a.warmup)])
            acc = {m: {"t": [], "calls": 0, "reads": 0, "rounds": []} for m in dss}
            order = list(dss)
            for r in range(a.rounds):
                batches = [rng.integers(0, n, a.batch) for _ in range(a.batches)]
                for m in order:                          # A B, then B A next round
                    ts, calls, reads = _time_batches(dss[m], batches)
                    acc[m]["t"] += ts
                    acc[m]["calls"] += calls
                    acc[m]["reads"] += reads
                    acc[m]["rounds"].append(1e6 * float(np.median(ts)))
                order.reverse()
            nb = a.rounds * a.batches
            rec = {"method": method, "sample": sname, "rank": rank, "ranks": size,
                   "fields": len(spec), "row_bytes_packed": dss["packed"]._pack.row_bytes,
                   "row_bytes_fields": sum(f.nbytes for f in dss["per_field"].schema.fields)}
            for m, v in acc.items():
                rec[m] = {"calls_per_batch": v["calls"] / nb, "reads_per_batch": v["reads"] / nb,
                          "us_per_batch_median": 1e6 * float(np.median(v["t"])),
                          "us_per_batch_p90": 1e6 * float(np.percentile(v["t"], 90)),
                          "us_per_batch_rounds": v["rounds"]}
            rec["reads_ratio"] = (rec["per_field"]["reads_per_batch"] /
                                  rec["packed"]["reads_per_batch"]
                                  if rec["packed"]["reads_per_batch"] else None)
            rec["time_ratio"] = (rec["per_field"]["us_per_batch_median"] /
                                 rec["packed"]["us_per_batch_median"])
            out.append(rec)
            for ds in dss.values():
                ds.free()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=200, help="timed batches per round and mode")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--per-rank", type=int, default=4096, help="samples per rank")
    ap.add_argument("--methods", default=None,
                    help="e.g. 0,1 (default: DDSTORE_METHOD when set, else 0,1)")
    ap.add_argument("--samples", default="hydragnn,large")
    ap.add_argument("--json", default=os.path.join(TOP, "out", "bench_pack.json"))
    a = ap.parse_args()
    m = a.methods or os.environ.get("DDSTORE_METHOD") or "0,1"
    a.methods = [int(x) for x in m.split(",") if x.strip()]
    a.samples = [s for s in a.samples.split(",") if s]
    bad = [s for s in a.samples if s not in SAMPLES]
    if bad:
        ap.error(f"unknown samples {bad} (known: {', '.join(SAMPLES)})")
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    load0 = os.getloadavg()
    t0 = time.time()
    recs = run(a, comm)
    allrecs = comm.gather(recs)
    if comm.Get_rank() != 0:
        return
    doc = {"bench": "bench_pack", "commit": _commit(), "time": t0,
           "settings": {"ranks": comm.Get_size(), "batch": a.batch, "batches": a.batches,
                        "rounds": a.rounds, "warmup": a.warmup, "per_rank": a.per_rank,
                        "methods": a.methods, "samples": a.samples,
                        "fabric": os.environ.get("DDSTORE_FABRIC", ""),
                        "cpus": os.cpu_count()},
           "loadavg_start": load0, "loadavg_end": os.getloadavg(),
           "results": [r for rs in allrecs for r in rs]}
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
    print(f"bench_pack: commit {doc['commit']}, {comm.Get_size()} ranks, load average "
          f"{load0[0]:.1f} -> {doc['loadavg_end'][0]:.1f} (times are only meaningful on a "
          "quiet machine)")
    print(f"{'method':>6} {'sample':>9} {'rank':>4} {'fields':>6}  {'reads/batch':>19}  "
          f"{'calls/batch':>11}  {'us/batch median':>21}")
    for r in doc["results"]:
        p, f = r["packed"], r["per_field"]
        print(f"{r['method']:>6} {r['sample']:>9} {r['rank']:>4} {r['fields']:>6}  "
              f"{p['reads_per_batch']:>8.1f} vs {f['reads_per_batch']:>8.1f}  "
              f"{p['calls_per_batch']:>3.0f} vs {f['calls_per_batch']:>3.0f}  "
              f"{p['us_per_batch_median']:>8.1f} vs {f['us_per_batch_median']:>8.1f}")
    print(f"packed vs per-field; JSON: {a.json}")


if __name__ == "__main__":
    main()
