"""ThreadDataLoader against a bare get_batch loop, per batch: wall time and CPU
(issue 25: "report where each µs goes and bring the loader's own CPU per
batch down").

    tools/ddrun -n 2 -- .venv/bin/python tools/bench_loader_cpu.py [ROUNDS [FIELDS [ARMS]]]

ARMS: comma-separated arms (default bare,collate,loader; also spin0, spin5,
spin20: the loader with the consumer polling 0 / 5 / 20 µs, not 50, before
it sleeps; bare+c, loader+c: bare and loader with a fixed training step per
batch, step(), compared with each other; uc, loader-uc: a user collate_fn
(torch.stack of ds.__getitems__'s samples) in the calling thread and
through the loader, whose worker is then a Python thread).  With
BENCH_PERF=DIR each rank runs `perf record -e cpu-clock` on itself over the
timed rounds only (not start-up or exit), into DIR/perf.RANK.data; then e.g.
`perf report -i DIR/perf.0.data --sort pid,dso,sym` splits the consumer
(the main thread) from the worker threads.

One job; samples of 3136 bytes (28 x 28 float32) in FIELDS fields (default 1),
batches of 128 random samples, 640 batches per epoch.  Three arms, interleaved
in every round (A B C A B C ...), each an epoch of the same 640 batches:

  bare     one _ddstore_torch.get_batch per field into preallocated tensors
  collate  ds._collate(list): the direct collate the loader's workers run
  loader   ThreadDataLoader(ds, batch_sampler=..., num_workers=1), an empty loop

Per arm: wall µs per batch, process CPU µs per batch (every thread of the
process: time.process_time) and the calling thread's CPU µs per batch
(time.thread_time; for the loader, the consumer).  The loader's own figures
(epoch_report: wait and fetch per batch) split its wall time.  Prints one JSON
line: per arm the median and min-max over rounds (max over ranks per round),
the ratios to bare of the same round, the load average before and after.
Figures taken while the machine is loaded are not publishable: the ratios of
one run are what this measures.
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
nf = int(sys.argv[2]) if len(sys.argv) > 2 else 1
n, B, NB = 8192, 128, 64
rng = np.random.default_rng(comm.Get_rank())
lists = [rng.integers(0, n, B).tolist() for _ in range(NB)]
tbs = [torch.tensor(b) for b in lists]
ws = [784 // nf + (1 if k < 784 % nf else 0) for k in range(nf)]


class Src(torch.utils.data.Dataset):
    """Sample i: 784 float32 values i, one (1, 28, 28) field or nf flat ones."""

    def __len__(self):
        return n

    def __getitem__(self, i):
        x = torch.full((784,), float(i))
        return x.view(1, 28, 28) if nf == 1 else \
            {f"f{k}": v.clone() for k, v in enumerate(x.split(ws))}


class Sampler(torch.utils.data.Sampler):   # an epoch of 10 * NB batches
    def __len__(self):
        return 10 * NB

    def __iter__(self):
        for _ in range(10):
            yield from lists


ds = DistDataset(Src(), f"lcpu{nf}", comm)
fields = ds.schema.fields
outs = [torch.empty((B,) + tuple(f.row_shape)) for f in fields]


def timed(body):
    """(wall, process CPU, thread CPU) µs per batch of body() -> batches."""
    comm.Barrier()
    w0, p0, t0 = time.perf_counter(), time.process_time(), time.thread_time()
    m = body()
    return [(time.perf_counter() - w0) / m * 1e6, (time.process_time() - p0) / m * 1e6,
            (time.thread_time() - t0) / m * 1e6]


W = torch.randn(128, 128)


def step(batch):
    """The fixed training step of the +c arms: 2 matmuls of 128 x 128 (about
    0.1 ms of CPU on this machine), whatever the batch."""
    return (W @ W) @ W


def bare(compute=False):
    for _ in range(10):
        for tb in tbs:
            for f, o in zip(fields, outs):
                ext.get_batch(ds.ddstore, f.var, o, tb)
            if compute:
                step(outs)
    return 10 * NB


def collate():
    for _ in range(10):
        for b in lists:
            ds._collate(b)
    return 10 * NB


def user_collate(rows):
    """A collate_fn of the user's (not default_collate): the loader's
    workers are then Python threads calling it."""
    return torch.stack(rows) if nf == 1 else rows


def uc():
    for _ in range(10):
        for b in lists:
            user_collate(ds.__getitems__(b))
    return 10 * NB


extra = {}


def loader(spin_ns=None, compute=False, collate_fn=None):
    lo = ThreadDataLoader(ds, batch_sampler=Sampler(), num_workers=1, collate_fn=collate_fn)
    it = iter(lo)
    if spin_ns is not None:   # the consumer's polling before it sleeps (pipeline.cpp)
        it._b.pipe.spin_ns = spin_ns
    next(it)
    m = 0
    for b in it:
        if compute:
            step(b)
        m += 1
    fig = lo.epoch_report()
    if spin_ns is None and not compute and collate_fn is None:
        extra.setdefault("wait_per_batch_us", []).append(1e3 * fig["wait_per_batch_ms"])
        extra.setdefault("fetch_per_batch_us", []).append(1e3 * fig["fetch_per_batch_ms"])
    lo.close()
    return m


arms = {"bare": bare, "collate": collate, "loader": loader,
        # not in the default set: the loader with the consumer's polling
        # shortened (spinN: N µs) or off (spin0), for A/B in one run
        "spin0": lambda: loader(0), "spin5": lambda: loader(5000),
        "spin20": lambda: loader(20000),
        # with a fixed training step per batch (step()): what users see
        "bare+c": lambda: bare(True), "loader+c": lambda: loader(compute=True),
        # a user collate_fn (Python worker threads): uc = the same fetch and
        # collate in the calling thread, loader-uc through the loader
        "uc": uc, "loader-uc": lambda: loader(collate_fn=user_collate)}
arms = {k: arms[k] for k in (sys.argv[3] if len(sys.argv) > 3 else
                              "bare,collate,loader").split(",")}
load0 = os.getloadavg()[0]
for fn in arms.values():   # warm-up
    fn()
extra.clear()
res = {k: [] for k in arms}
perf = None
if os.environ.get("BENCH_PERF"):
    import signal
    import subprocess
    perf = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", "5000",
                             "-p", str(os.getpid()), "-o",
                             os.path.join(os.environ["BENCH_PERF"],
                                          f"perf.{comm.Get_rank()}.data")])
    time.sleep(1.0)   # perf attached
for _ in range(rounds):
    for k, fn in arms.items():
        res[k].append(timed(fn))
if perf is not None:
    perf.send_signal(signal.SIGINT)
    perf.wait()
load1 = os.getloadavg()[0]
allr = comm.gather((res, extra), root=0)
if comm.Get_rank() == 0:
    def worst(k, r, j):   # max over ranks of round r, figure j
        return max(a[0][k][r][j] for a in allr)
    out = {"fields": nf, "rounds": rounds, "ranks": comm.Get_size(),
           "load": [round(load0, 2), round(load1, 2)], "cores": os.cpu_count()}
    for k in arms:
        for j, what in enumerate(("wall_us", "cpu_us", "thread_cpu_us")):
            v = [worst(k, r, j) for r in range(rounds)]
            out[f"{k}_{what}"] = [round(statistics.median(v), 1), round(min(v), 1),
                                  round(max(v), 1)]
        ref = "bare+c" if k.endswith("+c") else "uc" if k.endswith("-uc") else "bare"
        if k != ref and ref in arms:
            for j, what in ((0, "wall"), (1, "cpu")):
                v = [worst(k, r, j) / worst(ref, r, j) for r in range(rounds)]
                out[f"{k}/{ref}_{what}"] = [round(statistics.median(v), 2), round(min(v), 2),
                                            round(max(v), 2)]
    for k in extra:
        v = [max(a[1][k][r] for a in allr) for r in range(rounds)]
        out[f"loader_{k}"] = round(statistics.median(v), 1)
    print(json.dumps(out))
ds.free()
