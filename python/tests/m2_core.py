"""The core job of the method-2 tests (test_method2.py), launched with
tools/ddrun as a job of its own:

    tools/ddrun -n N python m2_core.py HANDSHAKE_DIR [--ns NS] [--tag T]
    SLURM_PROCID=r SLURM_NTASKS=N python m2_core.py HANDSHAKE_DIR --comm file

(--comm file: no MPI, a pyddstore.FileComm in HANDSHAKE_DIR-comm, which
must exist.)

Publishes, with PyDDStore(MPI.COMM_WORLD, method=2, handshake_dir=...):
  "a"  int64, 4 columns, row i = [T*10**6 + i*10 + j for j in 0..3]
  "b"  float32, 3 columns, row i = [T + i + j/10 for j]
  "c"  init() zeros then update(): uint8, 5 columns, row i = (i + j) % 251
Rank r holds ROWS[r % 4] rows (rank 1 none).  Then writes
HANDSHAKE_DIR/core-ready-T and serves until HANDSHAKE_DIR/core-stop-T exists
(or 300 s pass), then free()s and exits.  With --free-early, once
HANDSHAKE_DIR/core-free-T exists it free()s at once, writes
HANDSHAKE_DIR/core-freed-T and stays alive until core-stop-T.  The expected
values are recomputed by the tests with expected().
"""
import argparse
import os
import sys
import time

import numpy as np

ROWS = [3, 0, 5, 2]


def layout(n):
    counts = [ROWS[r % 4] for r in range(n)]
    first = [sum(counts[:r]) for r in range(n)]
    return counts, first, sum(counts)


def expected(n, tag):
    total = layout(n)[2]
    i = np.arange(total)
    a = (tag * 10**6 + i[:, None] * 10 + np.arange(4)[None, :]).astype(np.int64)
    b = (tag + i[:, None] + np.arange(3)[None, :] / 10).astype(np.float32)
    c = ((i[:, None] + np.arange(5)[None, :]) % 251).astype(np.uint8)
    return {"a": a, "b": b, "c": c}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("hs")
    ap.add_argument("--ns", default="")
    ap.add_argument("--tag", type=int, default=1)
    ap.add_argument("--serve-s", type=float, default=300)
    ap.add_argument("--comm", choices=("mpi", "file"), default="mpi")
    ap.add_argument("--free-early", action="store_true")
    args = ap.parse_args()
    import pyddstore
    if args.comm == "mpi":
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        r, n, barrier = comm.Get_rank(), comm.Get_size(), comm.Barrier
    else:
        comm = pyddstore.FileComm(args.hs.rstrip("/") + "-comm", ns=f"core{args.tag}")
        r, n, barrier = comm.rank, comm.size, comm.barrier
    counts, first, _ = layout(n)
    want = expected(n, args.tag)
    lo, hi = first[r], first[r] + counts[r]
    s = pyddstore.PyDDStore(comm, method=2, handshake_dir=args.hs, exchange_ns=args.ns)
    s.add("a", np.ascontiguousarray(want["a"][lo:hi]))
    s.add("b", np.ascontiguousarray(want["b"][lo:hi]))
    s.init("c", counts[r], 5, 1)
    if counts[r]:
        s.update("c", np.ascontiguousarray(want["c"][lo:hi]), 0)
    barrier()
    if r == 0:
        with open(os.path.join(args.hs, f"core-ready-{args.tag}"), "w") as f:
            f.write(str(os.getpid()))
    stop = os.path.join(args.hs, f"core-stop-{args.tag}")
    free = os.path.join(args.hs, f"core-free-{args.tag}")
    freed = False
    t0 = time.monotonic()
    while not os.path.exists(stop) and time.monotonic() - t0 < args.serve_s:
        if args.free_early and not freed and os.path.exists(free):
            s.free()
            freed = True
            barrier()
            if r == 0:
                with open(os.path.join(args.hs, f"core-freed-{args.tag}"), "w") as f:
                    f.write(str(os.getpid()))
        time.sleep(0.05)
    barrier()
    s.free()
    return 0


if __name__ == "__main__":
    sys.exit(main())
