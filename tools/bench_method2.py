#!/usr/bin/env python3
"""Method 2 read benchmark: a core job publishes, a reader in another job reads.

    .venv/bin/python tools/bench_method2.py [--core-ranks 2] [--fabric shm,tcp]
                                            [--reps 200] [--out out/bench]

For each provider: a core job (tools/ddrun, PyDDStore(comm, method=2)) adds
"small" (3136-byte rows, 20000 rows) and "large" (1 MiB rows, 64 rows);
this process joins both (PyDDStore(None, method=2, n_core=...)) and times
get_batch of random rows: 128 x 3136 B and 8 x 1 MiB, with 1, 2, 4 and 8
threads (each thread its own reader).  Beside each figure: the same bytes
gathered from a local numpy array in this process (fancy indexing, i.e.
memcpy of the rows), in the same run.  Prints a table; JSON lines in
OUT/bench-method2.json.  Figures, not assertions: every read is checked
for the right values once per configuration.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import numpy as np

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(TOP, "python"))
import pyddstore  # noqa: E402

SHAPES = {"small": (20000, 3136, 128), "large": (64, 1 << 20, 8)}   # rows, row bytes, batch

CORE = textwrap.dedent("""
    import os, sys, time
    import numpy as np
    from mpi4py import MPI
    import pyddstore
    hs, shapes = sys.argv[1], eval(sys.argv[2])
    c = MPI.COMM_WORLD
    r, n = c.Get_rank(), c.Get_size()
    s = pyddstore.PyDDStore(c, method=2, handshake_dir=hs)
    for name, (rows, rb, _) in shapes.items():
        lo, hi = rows * r // n, rows * (r + 1) // n
        a = (np.arange(lo, hi, dtype=np.int64)[:, None] * 7 +
             np.arange(rb // 8, dtype=np.int64)[None, :]).astype(np.int64)
        s.add(name, a)
    c.Barrier()
    if r == 0:
        open(os.path.join(hs, "ready"), "w").close()
    while not os.path.exists(os.path.join(hs, "stop")):
        time.sleep(0.05)
    c.Barrier()
    s.free()
""")


def expected(name, rows):
    rb = SHAPES[name][1]
    return (np.asarray(rows, dtype=np.int64)[:, None] * 7 +
            np.arange(rb // 8, dtype=np.int64)[None, :])


def timed(nthreads, reps, fn_factory):
    """Aggregate rows/s of nthreads threads each running fn reps times."""
    fns = [fn_factory(t) for t in range(nthreads)]
    start = threading.Barrier(nthreads + 1)
    times = [0.0] * nthreads

    def work(t):
        start.wait()
        t0 = time.perf_counter()
        for _ in range(reps):
            fns[t]()
        times[t] = time.perf_counter() - t0
    th = [threading.Thread(target=work, args=(t,)) for t in range(nthreads)]
    for x in th:
        x.start()
    start.wait()
    for x in th:
        x.join()
    return max(times)


def run_fabric(fabric, args, out):
    hs = tempfile.mkdtemp(prefix="ddst-bench-m2-")
    env = dict(os.environ, DDSTORE_FABRIC=fabric)
    core = subprocess.Popen([os.path.join(TOP, "tools", "ddrun"), "-n", str(args.core_ranks),
                             "--timeout", "900", "--", sys.executable, "-c", CORE, hs,
                             repr(SHAPES)], env=env)
    try:
        while not os.path.exists(os.path.join(hs, "ready")):
            if core.poll() is not None:
                raise SystemExit(f"core job failed ({core.returncode})")
            time.sleep(0.05)
        s = pyddstore.PyDDStore(None, method=2, handshake_dir=hs, n_core=args.core_ranks)
        for name in SHAPES:
            s.join(name)
        rng = np.random.default_rng(1)
        for name, (rows, rb, batch) in SHAPES.items():
            local = expected(name, np.arange(rows))          # the memcpy reference
            idx = [rng.integers(0, rows, batch) for _ in range(8)]
            for nthreads in args.threads:
                readers = [s.open_reader() for _ in range(nthreads)]
                bufs = [np.zeros((batch, rb // 8), np.int64) for _ in range(nthreads)]
                for t in range(nthreads):       # warm-up + check every value once
                    readers[t].get_batch(name, bufs[t], idx[t])
                    if not np.array_equal(bufs[t], local[idx[t]]):
                        raise SystemExit(f"{fabric} {name}: wrong values read")
                reps = max(1, args.reps if rb < (1 << 20) else args.reps // 8)
                dt = timed(nthreads, reps,
                           lambda t: (lambda r=readers[t], b=bufs[t], i=idx[t]:
                                      r.get_batch(name, b, i)))
                dm = timed(nthreads, reps,
                           lambda t: (lambda b=bufs[t], i=idx[t]: np.take(local, i, axis=0, mode="clip",
                                                                          out=b)))
                for r in readers:
                    r.close()
                n = nthreads * reps * batch
                row = {"method": 2, "fabric": fabric, "core_ranks": args.core_ranks,
                       "row_bytes": rb, "batch": batch, "threads": nthreads,
                       "us_per_row": dt / n * 1e6, "gb_per_s": n * rb / dt / 1e9,
                       "memcpy_us_per_row": dm / n * 1e6, "memcpy_gb_per_s": n * rb / dm / 1e9}
                out.write(json.dumps(row) + "\n")
                print(f"{fabric:12s} {rb:8d} B x {batch:3d}  {nthreads} thr  "
                      f"{row['us_per_row']:8.2f} us/row  {row['gb_per_s']:6.2f} GB/s   "
                      f"memcpy {row['memcpy_us_per_row']:7.2f} us/row "
                      f"{row['memcpy_gb_per_s']:6.2f} GB/s", flush=True)
        s.free()
    finally:
        open(os.path.join(hs, "stop"), "w").close()
        try:
            core.wait(120)
        except subprocess.TimeoutExpired:
            core.kill()
            core.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--core-ranks", type=int, default=2)
    ap.add_argument("--fabric", default="shm,tcp")
    ap.add_argument("--threads", default="1,2,4,8")
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--out", default=os.path.join(TOP, "out", "bench"))
    args = ap.parse_args()
    args.threads = [int(x) for x in args.threads.split(",")]
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "bench-method2.json")
    with open(path, "w") as out:
        for fabric in args.fabric.split(","):
            run_fabric(fabric, args, out)
    print(f"bench_method2: {path}")


if __name__ == "__main__":
    main()
