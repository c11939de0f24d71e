"""A store smoke test that needs no mpi4py, for other MPI implementations
than the one mpi4py was built against (ci/test_wheel.sh runs it under
MPICH: tools/ddrun --mpi mpich -n 2 -- python mpi_smoke.py).

PyDDStore(None) initialises MPI itself (MPI_COMM_WORLD).  Method 0 (MPI
RMA, passive target) and, when built with libfabric, method 1 over the
same communicator: add, init + update, get, get_batch of every row in
reverse, values checked; collective calls (init, free) are the barriers.
Prints "mpi_smoke: rank R ok (...)" and exits 0, or raises.
"""
import os
import sys
import tempfile

import numpy as np

import pyddstore


def check(method):
    kw = {}
    if method != 0:
        kw["handshake_dir"] = tempfile.gettempdir()
    s = pyddstore.PyDDStore(None, method=method, **kw)
    r, n = s.rank, s.size
    rows = 3 + r
    first = sum(3 + j for j in range(r))
    total = sum(3 + j for j in range(n))
    g = np.arange(first, first + rows, dtype=np.int64)
    s.add("a", np.ascontiguousarray(g[:, None] * 10 + np.arange(4)[None, :]))
    s.init("b", rows, 2, 8)          # float64 rows written by update()
    s.update("b", np.ascontiguousarray(
        np.stack([g * 0.5, g * -1.0], axis=1).astype(np.float64)), 0)
    s.init("_barrier", 1, 1, 1)      # every rank has updated "b"
    idx = np.arange(total, dtype=np.int64)[::-1].copy()
    a = np.zeros((total, 4), np.int64)
    s.get_batch("a", a, idx)
    want = idx[:, None] * 10 + np.arange(4)[None, :]
    assert np.array_equal(a, want), (method, a, want)
    b = np.zeros((total, 2), np.float64)
    s.get("b", b, 0)
    allg = np.arange(total)
    assert np.array_equal(b, np.stack([allg * 0.5, allg * -1.0], axis=1)), (method, b)
    s.epoch_begin()
    s.epoch_end()
    s.free()
    return r, n


def main():
    methods = [0]
    if pyddstore.HAVE_OFI and os.environ.get("MPI_SMOKE_OFI", "1") != "0":
        methods.append(1)
    for m in methods:
        r, n = check(m)
    print(f"mpi_smoke: rank {r} of {n} ok (methods {methods}, pyddstore from "
          f"{os.path.dirname(pyddstore.__file__)})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
