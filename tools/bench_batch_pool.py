"""The batch pool on and off, per batch, in one job (batchpool.cpp; setting
DDSTORE_BATCH_POOL_BYTES).

    tools/ddrun -n 2 -- .venv/bin/python tools/bench_batch_pool.py [ROUNDS]

Two cases, method 0, random batches (the same lists in every arm):

  small  8192 samples of 3136 B (1 x 28 x 28 float32), batches of 128 (392 KiB)
  large  320 samples of 602,112 B (3 x 224 x 224 float32), batches of 64
         (36.75 MiB: above glibc's largest mmap threshold, 32 MiB, so torch's
         allocator maps fresh pages for every batch)

Arms per case, interleaved in every round (the pool switched with
ext.batch_pool(cap) before each arm: 0 drops its blocks):

  bare        _ddstore_torch.get_batch into one preallocated tensor
  collate     ds._collate(list), the pool on (256 MiB)
  collate-off ds._collate(list), the pool off (every batch from torch's allocator)
  loader      ThreadDataLoader (1 worker), an empty loop, the pool on
  loader-off  the same, the pool off

Prints one JSON line: per case and arm the wall and process CPU µs per batch
(median, min, max over rounds; max over ranks per round), and per round the
ratios off / on and on / bare.  Figures taken while the machine is loaded are
not publishable: the ratios of one run are what this measures.
"""
import json
import os
import statistics
import sys
import time

import numpy as np
import torch
from mpi4py import MPI

from pyddstore.torch import DistDataset, ThreadDataLoader
from pyddstore.torch._ext import ext

torch.set_num_threads(1)
comm = MPI.COMM_WORLD
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
ON = 256 << 20
CASES = {"small": (8192, (1, 28, 28), 128, 320), "large": (320, (3, 224, 224), 64, 12)}


class Src(torch.utils.data.Dataset):
    def __init__(self, n, shape):
        self.n, self.shape = n, shape

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.full(self.shape, float(i))


def timed(body, cap, lists):
    """(wall, process CPU) µs per batch of body(lists) -> batches, pool cap
    `cap`; first an untimed body of 3 batches (with the pool on, it holds
    the blocks an epoch reuses: the arm times the steady state, as an epoch
    of thousands of batches sees it)."""
    ext.batch_pool(cap)
    body(lists[:3])
    comm.Barrier()
    w0, p0 = time.perf_counter(), time.process_time()
    m = body(lists)
    return [(time.perf_counter() - w0) / m * 1e6, (time.process_time() - p0) / m * 1e6]


def arms_of(ds, shape, B):
    out = torch.empty((B,) + shape)
    var = ds.schema.fields[0].var

    def bare(lists):
        for b in lists:
            ext.get_batch(ds.ddstore, var, out, b)
        return len(lists)

    def collate(lists):
        for b in lists:
            x = ds._collate(b)
        del x
        return len(lists)

    def loader(lists):
        lo = ThreadDataLoader(ds, batch_sampler=lists, num_workers=1)
        m = 0
        for _ in lo:
            m += 1
        lo.close()
        return m
    return {"bare": (bare, ON), "collate": (collate, ON), "collate-off": (collate, 0),
            "loader": (loader, ON), "loader-off": (loader, 0)}


load0 = os.getloadavg()[0]
res, arms = {}, {}
for case, (n, shape, B, nb) in CASES.items():
    ds = DistDataset(Src(n, shape), f"bpool_{case}", comm)
    rng = np.random.default_rng(comm.Get_rank())
    lists = [rng.integers(0, n, B).tolist() for _ in range(nb)]
    arms[case] = (ds, arms_of(ds, shape, B), lists)
    for k, (fn, cap) in arms[case][1].items():   # warm-up
        timed(fn, cap, lists)
        res[(case, k)] = []
for _ in range(rounds):
    for case, (ds, a, lists) in arms.items():
        for k, (fn, cap) in a.items():
            res[(case, k)].append(timed(fn, cap, lists))
load1 = os.getloadavg()[0]
ext.batch_pool(ON)
allr = comm.gather(res, root=0)
if comm.Get_rank() == 0:
    def worst(key, r, j):   # max over ranks of round r, figure j
        return max(a[key][r][j] for a in allr)

    def spread(v, nd=1):
        return [round(statistics.median(v), nd), round(min(v), nd), round(max(v), nd)]
    out = {"rounds": rounds, "ranks": comm.Get_size(), "cores": os.cpu_count(),
           "load": [round(load0, 2), round(load1, 2)], "cases": {}}
    for case, (n, shape, B, nb) in CASES.items():
        c = out["cases"][case] = {"batch": B, "sample_bytes": 4 * int(np.prod(shape)),
                                  "batches": nb}
        for k in arms[case][1]:
            for j, what in enumerate(("wall_us", "cpu_us")):
                c[f"{k}_{what}"] = spread([worst((case, k), r, j) for r in range(rounds)])
        for a in ("collate", "loader"):
            for j, what in enumerate(("wall", "cpu")):
                c[f"{a}-off/{a}_{what}"] = spread(
                    [worst((case, a + "-off"), r, j) / worst((case, a), r, j)
                     for r in range(rounds)], 3)
                c[f"{a}/bare_{what}"] = spread(
                    [worst((case, a), r, j) / worst((case, "bare"), r, j)
                     for r in range(rounds)], 3)
    print(json.dumps(out))
for ds, _, _ in arms.values():
    ds.free()
