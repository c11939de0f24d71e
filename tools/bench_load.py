#!/usr/bin/env python3
"""Store building: the time DistDataset creation takes on N samples (the walk
over the user's samples, samples.cpp, plus the store's add), per case:

  per-field      dict samples of 4 fixed fields (tensor (16,), int, ndarray (4,),
                 np.float32), one variable each
  packed         the same, pack_fields=True (one row per sample)
  ragged         x [n, 8], edge_index [2, 2n] (n in 1..19), y (1,), ragged=True
  ragged+packed  the same with pack_fields=True

    tools/ddrun -n 2 -- .venv/bin/python tools/bench_load.py [N] [REPEATS]

Prints min and median ms per case (rank 0).  Compare two trees side by side in
one run (PYTHONPATH=... for the other); figures are to be taken on a quiet
machine (on a loaded one, mark them with the load).
"""
import sys
import time

import numpy as np
import torch
from mpi4py import MPI

from pyddstore.torch import DistDataset

N = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
REP = int(sys.argv[2]) if len(sys.argv) > 2 else 5


class Fixed(torch.utils.data.Dataset):
    def __init__(self, rng):
        self.x = torch.randn(N, 16)
        self.z = rng.standard_normal((N, 4)).astype(np.float32)

    def __len__(self):
        return N

    def __getitem__(self, i):
        return {"x": self.x[i], "y": i, "z": self.z[i], "w": np.float32(i)}


class Ragged(torch.utils.data.Dataset):
    def __init__(self, rng):
        n = rng.integers(1, 20, N)
        self.x = [torch.randn(int(k), 8) for k in n]
        self.e = [torch.randint(0, 10, (2, int(k) * 2)) for k in n]

    def __len__(self):
        return N

    def __getitem__(self, i):
        return {"x": self.x[i], "edge_index": self.e[i], "y": torch.tensor([float(i)])}


def main():
    comm = MPI.COMM_WORLD
    rng = np.random.default_rng(0)
    fixed, ragged = Fixed(rng), Ragged(rng)
    cases = [("per-field", fixed, {}), ("packed", fixed, {"pack_fields": True}),
             ("ragged", ragged, {"ragged": True}),
             ("ragged+packed", ragged, {"ragged": True, "pack_fields": True})]
    for name, src, kw in cases:
        ts = []
        for r in range(REP):
            comm.Barrier()
            t = time.perf_counter()
            ds = DistDataset(src, f"bench_load{r}", comm, **kw)
            comm.Barrier()
            ts.append(time.perf_counter() - t)
            ds.free()
        if comm.rank == 0:
            print(f"{name:14s} N={N} min {min(ts) * 1e3:8.1f} ms  median "
                  f"{sorted(ts)[len(ts) // 2] * 1e3:8.1f} ms", flush=True)


if __name__ == "__main__":
    main()
