"""The torch path against the store under it (issue 14 part 2), a program for
before/after comparisons: it uses only calls that older trees have too.

    tools/ddrun -n 2 -- .venv/bin/python tools/bench_torch_path.py [ROWS [REPS]]

One job; for samples of 3136 bytes in 1, 3 and 8 fields: the bare reads (one
_ddstore_torch.get_batch per field into preallocated tensors), the direct
collate ds._collate(list) (what ThreadDataLoader calls), and a ThreadDataLoader
with 1 worker delivering an epoch of 640 batches of 128 to an empty loop.
Prints one JSON line: per field count and case [min, median] over REPS of
microseconds per batch (the mean of 64 batches; the loader: of its epoch),
max over ranks.  tools/bench_torch.py overhead has the breakdown."""
import json, statistics, sys, time
import numpy as np, torch
from mpi4py import MPI
from pyddstore.torch import DistDataset, ThreadDataLoader
from pyddstore.torch._ext import ext
torch.set_num_threads(1)
comm = MPI.COMM_WORLD
n = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 7
rng = np.random.default_rng(comm.Get_rank())
batches = [rng.integers(0, n, 128) for _ in range(64)]
lists = [b.tolist() for b in batches]
tb = [torch.from_numpy(b) for b in batches]
class BS(torch.utils.data.Sampler):       # an epoch of 640 batches
    def __len__(self): return 640
    def __iter__(self):
        for _ in range(10): yield from lists
res = {}
for nf in (1, 3, 8):
    ws = [784 // nf + (1 if k < 784 % nf else 0) for k in range(nf)]
    class Src(torch.utils.data.Dataset):
        def __len__(self): return n
        def __getitem__(self, i):
            if nf == 1: return torch.full((1, 28, 28), float(i))
            return {f"f{k}": torch.full((w,), float(i)) for k, w in enumerate(ws)}
    ds = DistDataset(Src(), f"cmp{nf}", comm)
    fields = ds.schema.fields
    outs = [torch.empty((128,) + tuple(f.row_shape)) for f in fields]
    def bare(k):
        for f, o in zip(fields, outs): ext.get_batch(ds.ddstore, f.var, o, tb[k])
    def coll(k): ds._collate(lists[k])
    def t64(fn):
        for k in range(8): fn(k)
        out = []
        for _ in range(reps):
            comm.Barrier(); t0 = time.perf_counter()
            for k in range(64): fn(k)
            out.append((time.perf_counter() - t0) / 64 * 1e6)
        return min(out), statistics.median(out)
    def loader():
        out = []
        for _ in range(reps):
            comm.Barrier()
            it = iter(ThreadDataLoader(ds, batch_sampler=BS(), num_workers=1))
            next(it); t0 = time.perf_counter(); m = 0
            for _ in it: m += 1
            out.append((time.perf_counter() - t0) / m * 1e6)
        return min(out), statistics.median(out)
    res[nf] = {"bare": t64(bare), "collate": t64(coll), "loader": loader()}
    ds.free()
allr = comm.gather(res, root=0)
if comm.Get_rank() == 0:
    print(json.dumps({str(nf): {k: [max(r[nf][k][0] for r in allr), max(r[nf][k][1] for r in allr)] for k in allr[0][nf]} for nf in (1, 3, 8)}))
