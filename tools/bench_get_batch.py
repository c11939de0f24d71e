#!/usr/bin/env python3
"""Python get_batch next to a numpy gather of the same rows (issue 25).

    .venv/bin/python tools/bench_get_batch.py [--methods 0,1] [--ranks 1,2]
        [--rounds 15] [--iters 400] [--batch 128] [--row-bytes 3136]
        [--out out/bench_get_batch.json]

For each method and rank count it launches itself under tools/ddrun.  Every
rank holds `rows_per_rank` rows of `row_bytes` bytes (uint8) in a store, and
a numpy copy of the whole variable (every rank's rows) in local memory.
Each round draws `iters` random batches of `batch` global indices (the same
for both sides) and times, interleaved in the round (A B A B ...):

  get_batch   store.get_batch(name, out, idx)          (rows from every rank)
  np.take     np.take(local_copy, idx, axis=0, out=out)  (local memory only)
  np.take clip  the same with mode="clip"

so the ratio get_batch / np.take is what the binding and the store add over
a plain gather of the same bytes, measured in the same run.  Note: with its
default mode="raise" and out=, numpy gathers into a temporary copy of `out`
and copies it back (so that `out` is untouched when an index is bad): three
passes over the batch's bytes.  mode="clip" (any index valid) gathers
straight into `out`, one pass: the stricter baseline, reported next to it.  Results (one
JSON line per configuration, plus a "run" line: commit, settings, load
average) go to --out; a table to stdout.  On 2 ranks the rows of the other
rank come through the transport's same-node path (method 0: POSIX shared
memory mapped by the node's ranks; method 1: the mapped shards), so both
sides copy from memory.

Figures depend on the machine's load: take them on a quiet machine (the
load average at start and end is recorded and printed; at more than 1 per
core the table says so).  Instruction counts (valgrind --tool=callgrind
--toggle-collect) are load-independent: see docs/measurements.md.
"""
import argparse
import json
import os
import subprocess
import sys
import time

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DDRUN = os.path.join(TOP, "tools", "ddrun")


def _git(*args):
    return subprocess.run(["git", *args], cwd=TOP, capture_output=True, text=True).stdout.strip()


def worker(a):
    """One configuration, on every rank of a ddrun job; rank 0 prints one
    JSON line (prefixed RESULT) with the rounds."""
    import numpy as np
    import pyddstore

    comm = None
    try:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    except ImportError:
        pass
    store = pyddstore.PyDDStore(comm, method=a.method)
    rank, size = store.rank, store.size
    n_local = a.rows_per_rank
    total = n_local * size
    # Row r holds bytes derived from r: the same in the store and the copy.
    allrows = (np.arange(total, dtype=np.uint64)[:, None] * 2654435761 +
               np.arange(a.row_bytes, dtype=np.uint64)[None, :]).astype(np.uint8)
    mine = np.ascontiguousarray(allrows[rank * n_local:(rank + 1) * n_local])
    store.add("x", mine)
    local = allrows                       # the numpy side: every row, local
    out_a = np.empty((a.batch, a.row_bytes), dtype=np.uint8)
    out_b = np.empty_like(out_a)
    rng = np.random.default_rng(1234 + rank)
    batches = [rng.integers(0, total, a.batch, dtype=np.int64) for _ in range(a.iters)]
    # check once: both sides give the same bytes
    store.get_batch("x", out_a, batches[0])
    np.take(local, batches[0], axis=0, out=out_b)
    if not np.array_equal(out_a, out_b):
        raise SystemExit("bench_get_batch: get_batch and np.take differ")
    get_batch = store.get_batch
    take = np.take
    rounds = []
    for r in range(a.rounds + 1):          # round 0 warms up, not kept
        t0 = time.perf_counter_ns()
        for idx in batches:
            get_batch("x", out_a, idx)
        t1 = time.perf_counter_ns()
        for idx in batches:
            take(local, idx, axis=0, out=out_b)
        t2 = time.perf_counter_ns()
        for idx in batches:
            take(local, idx, axis=0, out=out_b, mode="clip")
        t3 = time.perf_counter_ns()
        if r > 0:
            rounds.append({"get_batch_ns": (t1 - t0) / a.iters,
                           "np_take_ns": (t2 - t1) / a.iters,
                           "np_take_clip_ns": (t3 - t2) / a.iters})
    if comm is not None:
        comm.Barrier()
    store.free()
    if rank == 0:
        print("RESULT " + json.dumps({
            "kind": "get_batch_vs_take", "method": a.method, "ranks": size,
            "batch": a.batch, "row_bytes": a.row_bytes, "rows_per_rank": n_local,
            "iters": a.iters, "module": pyddstore._core.__file__,
            "rounds": rounds}), flush=True)


def _median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def summarise(res):
    ratios = [r["get_batch_ns"] / r["np_take_ns"] for r in res["rounds"]]
    res["get_batch_us_median"] = _median([r["get_batch_ns"] for r in res["rounds"]]) / 1e3
    res["np_take_us_median"] = _median([r["np_take_ns"] for r in res["rounds"]]) / 1e3
    res["ratio_median"] = _median(ratios)
    res["ratio_min"] = min(ratios)
    res["ratio_max"] = max(ratios)
    clip = [r["get_batch_ns"] / r["np_take_clip_ns"] for r in res["rounds"]]
    res["np_take_clip_us_median"] = _median([r["np_take_clip_ns"] for r in res["rounds"]]) / 1e3
    res["ratio_clip_median"] = _median(clip)
    res["ratio_clip_min"] = min(clip)
    res["ratio_clip_max"] = max(clip)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", default="0,1")
    ap.add_argument("--ranks", default="1,2")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--iters", type=int, default=400, help="batches per side per round")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--row-bytes", type=int, default=3136)
    ap.add_argument("--rows-per-rank", type=int, default=8192)
    ap.add_argument("--out", default=os.path.join(TOP, "out", "bench_get_batch.json"))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--method", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a)
        return 0
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    run = {"kind": "run", "commit": _git("rev-parse", "--short", "HEAD") + ("+dirty" if dirty else ""),
           "cpus": os.cpu_count(), "loadavg_start": os.getloadavg(),
           "settings": {k: v for k, v in os.environ.items() if k.startswith("DDSTORE_")},
           "args": {k: v for k, v in vars(a).items() if k not in ("worker", "method")}}
    results = []
    rc = 0
    for m in [int(x) for x in a.methods.split(",")]:
        for n in [int(x) for x in a.ranks.split(",")]:
            cmd = [DDRUN, "-n", str(n), "--timeout", "900", "--", sys.executable,
                   os.path.abspath(__file__), "--worker", "--method", str(m),
                   "--rounds", str(a.rounds), "--iters", str(a.iters), "--batch", str(a.batch),
                   "--row-bytes", str(a.row_bytes), "--rows-per-rank", str(a.rows_per_rank)]
            print("+ " + " ".join(cmd), flush=True)
            p = subprocess.run(cmd, capture_output=True, text=True)
            got = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
            if p.returncode != 0 or not got:
                sys.stderr.write(p.stdout[-2000:] + p.stderr[-2000:])
                print(f"method {m}, {n} ranks: failed (exit {p.returncode})")
                rc = 1
                continue
            results.append(summarise(json.loads(got[0][len("RESULT "):])))
    run["loadavg_end"] = os.getloadavg()
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        f.write(json.dumps(run) + "\n")
        for r in results:
            f.write(json.dumps(r) + "\n")
    busy = max(run["loadavg_start"][0], run["loadavg_end"][0]) > run["cpus"]
    print(f"commit {run['commit']}, load average {run['loadavg_start'][0]:.1f} -> "
          f"{run['loadavg_end'][0]:.1f} on {run['cpus']} CPUs"
          + ("  (BUSY: more than 1 per core; not a publishable figure)" if busy else ""))
    print("per batch, medians of the rounds; ratios get_batch / numpy: median (min-max of rounds)")
    print(f"{'method':>6} {'ranks':>5} {'get_batch us':>13} {'np.take us':>11} {'clip us':>8} "
          f"{'vs np.take':>22} {'vs clip':>22}")
    for r in results:
        print(f"{r['method']:>6} {r['ranks']:>5} {r['get_batch_us_median']:>13.2f} "
              f"{r['np_take_us_median']:>11.2f} {r['np_take_clip_us_median']:>8.2f} "
              f"  {r['ratio_median']:.3f} ({r['ratio_min']:.3f}-{r['ratio_max']:.3f})"
              f"  {r['ratio_clip_median']:.3f} ({r['ratio_clip_min']:.3f}-{r['ratio_clip_max']:.3f})")
    print(f"JSON: {a.out}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
