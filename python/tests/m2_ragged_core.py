"""The core job of the ragged method-2 test (test_ragged_method2.py),
launched with tools/ddrun as a job of its own:

    tools/ddrun -n N python m2_ragged_core.py HANDSHAKE_DIR [--tag T]

Publishes, with PyDDStore(MPI.COMM_WORLD, method=2, handshake_dir=...):
  "r"  add_ragged: float32 samples of (length(g), 3), see expected()
  "u"  init_ragged then update_ragged: int64 samples of (length(g), 2)
Rank r holds SAMPLES[r % 4] samples (rank 1 none); lengths include 0.  Then
writes HANDSHAKE_DIR/core-ready-T and serves until HANDSHAKE_DIR/core-stop-T
exists (or 300 s pass), then free()s and exits.
"""
import argparse
import os
import sys
import time

import numpy as np

SAMPLES = [4, 0, 6, 3]


def layout(n):
    counts = [SAMPLES[r % 4] for r in range(n)]
    first = [sum(counts[:r]) for r in range(n)]
    return counts, first, sum(counts)


def length(g):
    return (5 * g + 2) % 7          # 0..6


def expected(tag, name, g):
    """Sample g of variable `name`."""
    e = np.arange(length(g))[:, None]
    if name == "r":
        return (tag * 1000 + g * 10 + e + np.arange(3)[None, :] / 4).astype(np.float32)
    return (tag * 10**6 + g * 100 + e * 2 + np.arange(2)[None, :]).astype(np.int64)


def local(tag, name, lo, hi, cols):
    parts = [expected(tag, name, g) for g in range(lo, hi)]
    dt = np.float32 if name == "r" else np.int64
    vals = np.concatenate(parts) if parts else np.zeros((0, cols), dt)
    return np.ascontiguousarray(vals), np.array([length(g) for g in range(lo, hi)], np.int64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("hs")
    ap.add_argument("--tag", type=int, default=1)
    ap.add_argument("--serve-s", type=float, default=300)
    args = ap.parse_args()
    import pyddstore
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    r, n = comm.Get_rank(), comm.Get_size()
    counts, first, _ = layout(n)
    lo, hi = first[r], first[r] + counts[r]
    s = pyddstore.PyDDStore(comm, method=2, handshake_dir=args.hs)
    vals, lens = local(args.tag, "r", lo, hi, 3)
    s.add_ragged("r", vals, lens)
    s.init_ragged("u", lens, 2, dtype="int64")
    uvals, _ = local(args.tag, "u", lo, hi, 2)
    s.update_ragged("u", uvals, 0, hi - lo)
    comm.Barrier()
    if r == 0:
        with open(os.path.join(args.hs, f"core-ready-{args.tag}"), "w") as f:
            f.write(str(os.getpid()))
    stop = os.path.join(args.hs, f"core-stop-{args.tag}")
    t0 = time.monotonic()
    while not os.path.exists(stop) and time.monotonic() - t0 < args.serve_s:
        time.sleep(0.05)
    comm.Barrier()
    s.free()
    return 0


if __name__ == "__main__":
    sys.exit(main())
