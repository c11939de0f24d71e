"""Store-only demo: Fashion-MNIST in a distributed store, read back in shuffled batches.

    tools/ddrun -n 4 -- .venv/bin/python examples/store_demo.py [--data DIR] [--batch 128]

Each rank adds its share of the training set (images as 784-byte rows, labels as
int64), then every rank reads random shuffled batches of the whole set through
get_batch, checks every sample against the source, and prints rows/s and GB/s next
to memcpy of the same bytes (the local limit).
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mnist_data  # noqa: E402
import pyddstore  # noqa: E402
from mpi4py import MPI  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=None)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--method", type=int, default=int(os.environ.get("DDSTORE_METHOD", "0")))
    args = ap.parse_args()

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    images, labels = mnist_data.load(args.data)
    n = len(images)
    flat = images.reshape(n, -1)
    lo, hi = rank * n // size, (rank + 1) * n // size

    store = pyddstore.PyDDStore(comm, method=args.method)
    store.add("images", np.ascontiguousarray(flat[lo:hi]))
    store.add("labels", labels[lo:hi].astype(np.int64))
    total, disp, itemsize = store.info("images")
    assert total == n and disp == flat.shape[1], (total, disp)

    rng = np.random.default_rng(1234 + rank)
    x = np.empty((args.batch, disp), dtype=np.uint8)
    y = np.empty(args.batch, dtype=np.int64)
    rows = 0
    t_read = 0.0
    for epoch in range(args.epochs):
        order = rng.permutation(n)
        for b in range(0, n - args.batch + 1, args.batch):
            idx = order[b:b + args.batch]
            t0 = time.perf_counter()
            store.get_batch("images", x, idx)
            store.get_batch("labels", y, idx)
            t_read += time.perf_counter() - t0
            if not (np.array_equal(x, flat[idx]) and np.array_equal(y, labels[idx])):
                bad = int(np.nonzero((x != flat[idx]).any(axis=1) | (y != labels[idx]))[0][0])
                raise SystemExit(f"rank {rank}: sample {idx[bad]} differs from the source")
            rows += len(idx)
    nbytes = rows * (disp + 8)

    # memcpy of the same bytes, same batch shape: the local limit
    src = np.ascontiguousarray(flat[:args.batch * 8])
    t0 = time.perf_counter()
    copies = 0
    while time.perf_counter() - t0 < 0.5:
        np.copyto(x, src[(copies % 8) * args.batch:(copies % 8 + 1) * args.batch])
        copies += 1
    t_memcpy = (time.perf_counter() - t0) / (copies * args.batch * disp)

    res = comm.gather((rows, t_read, nbytes, t_memcpy), root=0)
    prof = store.get_profile("images")
    store.free()
    if rank == 0:
        for r, (rw, t, nb, tm) in enumerate(res):
            print(f"rank {r}: {rw} samples checked, {rw / t:,.0f} rows/s, "
                  f"{nb / t / 1e9:.2f} GB/s, {t / rw * 1e6:.2f} us/row; "
                  f"memcpy limit {1 / tm / 1e9:.2f} GB/s")
        print(f"all {size} ranks: every sample equal to the source "
              f"({sum(r[0] for r in res)} reads, batch {args.batch}, method {args.method})")
        print("profile (images, rank 0):", {k: v for k, v in prof.items() if v})


if __name__ == "__main__":
    main()
