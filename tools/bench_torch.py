#!/usr/bin/env python3
"""Benchmarks of the PyTorch layer (programs, not tests).

    .venv/bin/python tools/bench_torch.py            # all three, results in out/bench_torch/
    .venv/bin/python tools/bench_torch.py memory     # (1) chunk_size peak memory
    .venv/bin/python tools/bench_torch.py vae        # (2) VAE epoch: ddstore vs local DataLoader
    .venv/bin/python tools/bench_torch.py overhead   # (3) __getitems__ vs bare get_batch

(1) Peak memory of loading a DistDataset whose per-rank share is --share-mib
    (default 400) MiB, with and without chunk_size: each variant in a fresh
    job, peak RSS (ru_maxrss) above the RSS measured just before the
    DistDataset is built.  The source makes its samples on the fly, so it
    holds no copy of the data.
(2) VAE (examples/vae) epoch time on --ranks (default 4) ranks:
    ThreadDataLoader over a DistDataset vs a plain DataLoader over the same
    samples held locally in memory (the limit), alternating in one run.
(3) One batch of 128 samples of 3136 bytes (28x28 float32), in 1, 3 and 8
    fields (--fields): the direct collate (what ThreadDataLoader calls), the
    batches a ThreadDataLoader with 1 worker delivers, read_rows,
    __getitems__ and default_collate(__getitems__) vs the bare reads (one
    _ddstore_torch.get_batch per field into preallocated tensors), with the
    parts of the collate's cost (index conversion, allocation, the rest);
    minimum and median microseconds per batch.

Every part launches itself under tools/ddrun; --json writes the results.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(TOP, "python"))
OUT = os.path.join(TOP, "out", "bench_torch")
DDRUN = os.path.join(TOP, "tools", "ddrun")


def _rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _maxrss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _launch(part, ranks, extra, timeout):
    os.makedirs(OUT, exist_ok=True)
    res = os.path.join(OUT, f"_{part}_{os.getpid()}.json")
    cmd = [DDRUN, "-n", str(ranks), "--timeout", str(timeout), "--", sys.executable,
           os.path.abspath(__file__), "_" + part, "--result", res] + extra
    print("+ " + " ".join(cmd), flush=True)
    rc = subprocess.call(cmd, cwd=TOP)
    if rc != 0:
        raise SystemExit(f"bench_torch: {part} exited {rc}")
    with open(res) as f:
        out = json.load(f)
    os.unlink(res)
    return out


# ------------------------------------------------------------- (1) memory ---
def part_memory(a):
    import torch
    from mpi4py import MPI
    from pyddstore.torch import DistDataset
    comm = MPI.COMM_WORLD
    row_floats = a.row_kib * 256
    n_per_rank = int(a.share_mib * 1024 // a.row_kib)
    n = n_per_rank * comm.Get_size()

    class Src(torch.utils.data.Dataset):
        def __len__(self):
            return n

        def __getitem__(self, i):
            return torch.full((row_floats,), float(i % 1000))
    base = _rss_mib()
    comm.Barrier()
    t0 = time.perf_counter()
    ds = DistDataset(Src(), "mem", comm, chunk_size=a.chunk or None)
    load = time.perf_counter() - t0
    peak = _maxrss_mib()
    ok = float(ds[n - 1].view(-1)[0]) == float((n - 1) % 1000)
    after = _rss_mib()
    ds.free()
    rows = comm.gather({"rank": comm.Get_rank(), "base_mib": base, "peak_mib": peak,
                        "peak_above_base_mib": peak - base, "after_mib": after,
                        "load_s": load, "ok": ok}, root=0)
    if comm.Get_rank() == 0:
        share = n_per_rank * row_floats * 4 / 2**20
        _write(a.result, {"chunk_size": a.chunk or None, "share_mib": share,
                          "row_bytes": row_floats * 4, "rows_per_rank": n_per_rank,
                          "ranks": rows})


def run_memory(args):
    results = []
    for chunk in (0, args.chunk):
        r = _launch("memory", args.mem_ranks,
                    ["--share-mib", str(args.share_mib), "--row-kib", str(args.row_kib),
                     "--chunk", str(chunk)], 900)
        results.append(r)
    print("\n(1) chunk_size peak memory, share %.0f MiB per rank (%d rows of %d KiB), %d ranks"
          % (results[0]["share_mib"], results[0]["rows_per_rank"], args.row_kib,
             args.mem_ranks))
    for r in results:
        peak = max(x["peak_above_base_mib"] for x in r["ranks"])
        load = max(x["load_s"] for x in r["ranks"])
        print(f"    chunk_size={str(r['chunk_size']):>6}: peak {peak:7.0f} MiB above the "
              f"baseline ({peak / r['share_mib']:.2f} x share), load {load:.1f} s, "
              f"check {'ok' if all(x['ok'] for x in r['ranks']) else 'FAILED'}")
    return {"memory": results}


# ---------------------------------------------------------------- (2) vae ---
def part_vae(a):
    sys.path.insert(0, os.path.join(TOP, "examples", "vae"))
    import torch
    torch.set_num_threads(1)
    import vae_common as vc
    from pyddstore.torch import DistDataset, ThreadDataLoader
    ap = vc.add_common_args(argparse.ArgumentParser())
    args = ap.parse_args(["--epochs", "1", "--batch-size", str(a.batch), "--limit",
                          str(a.limit)])
    d = vc.Dist("mpi")
    device = d.device()
    src = vc.FashionMNIST(None, "train", 1, 1, a.limit)
    ds = DistDataset(src, "bench-vae", d.mpi, method=a.method)
    local = vc.InMemory(src)
    quiet = lambda *x, **k: None  # noqa: E731
    runs = {"ddstore+ThreadDataLoader": [], "local+DataLoader": []}
    for rep in range(a.reps):
        for name in (("ddstore+ThreadDataLoader", "local+DataLoader") if rep % 2 == 0 else
                     ("local+DataLoader", "ddstore+ThreadDataLoader")):
            if name.startswith("ddstore"):
                sampler = torch.utils.data.distributed.DistributedSampler(
                    ds, d.size, d.rank, shuffle=True, seed=rep)
                loader = ThreadDataLoader(ds, batch_size=a.batch, sampler=sampler,
                                          num_workers=a.workers, drop_last=True)
            else:
                sampler = torch.utils.data.distributed.DistributedSampler(
                    local, d.size, d.rank, shuffle=True, seed=rep)
                loader = torch.utils.data.DataLoader(local, batch_size=a.batch,
                                                     sampler=sampler, drop_last=True)
            _, hist = vc.train(args, d, None, loader, sampler, device, quiet)
            if hasattr(loader, "close"):
                loader.close()
            runs[name].append({k: v for k, v in hist[0].items() if k != "report"})
    prof = vc.profile_summary(ds, d)
    ds.free()
    d.close()
    if d.rank == 0:
        _write(a.result, {"ranks": d.size, "batch": a.batch, "samples": len(src),
                          "workers": a.workers, "method": ds.method, "runs": runs,
                          "profile": prof})


def run_vae(args):
    r = _launch("vae", args.ranks, ["--reps", str(args.reps), "--batch", str(args.batch),
                                    "--limit", str(args.limit), "--workers",
                                    str(args.workers), "--method", str(args.method)], 1800)
    print(f"\n(2) VAE epoch, {r['ranks']} ranks, {r['samples']} samples, batch {r['batch']} "
          f"per rank, ddstore method {r['method']}, {r['workers']} loader thread(s), median "
          f"of {args.reps} alternating epochs each")
    for name, hs in r["runs"].items():
        med = lambda k: statistics.median(h[k] for h in hs)  # noqa: E731
        print(f"    {name:26s} epoch {med('epoch_s'):6.2f} s  waiting for data "
              f"{med('wait_s'):5.2f} s  computing {med('compute_s'):6.2f} s  "
              f"(losses {', '.join('%.2f' % h['loss'] for h in hs)})")
    if r.get("profile"):
        s = r["profile"]["sum"]
        print(f"    ddstore reads: {s['total_ns'] / max(1, s['rows']) / 1e3:.1f} us/row "
              f"({int(s['rows'])} rows, {s['total_ns'] / 1e9:.1f} s in reads over all ranks)")
    return {"vae": r}


# ----------------------------------------------------------- (3) overhead ---
def _widths(nf, total=784):
    """nf field widths (float32 elements) summing to `total` (3136 bytes)."""
    return [total // nf + (1 if k < total % nf else 0) for k in range(nf)]


def part_overhead(a):
    import numpy as np
    import torch
    from mpi4py import MPI
    from torch.utils.data import default_collate
    from pyddstore.torch import DistDataset, ThreadDataLoader
    from pyddstore.torch._ext import ext
    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    n = a.rows
    rng = np.random.default_rng(comm.Get_rank())
    batches = [rng.integers(0, n, a.batch) for _ in range(64)]
    lists = [b.tolist() for b in batches]

    def timed(fn):
        """median and minimum over reps of the mean of 64 calls, µs."""
        for k in range(8):
            fn(k)
        times = []
        for rep in range(a.reps):
            comm.Barrier()
            t0 = time.perf_counter()
            for k in range(64):
                fn(k)
            times.append((time.perf_counter() - t0) / 64 * 1e6)
        return {"median": statistics.median(times), "min": min(times)}

    class Batches(torch.utils.data.Sampler):
        """The 64 batches' indices as one sample stream (for the loader)."""
        def __init__(self, reps):
            self.reps = reps

        def __len__(self):
            return self.reps * 64 * a.batch

        def __iter__(self):
            for _ in range(self.reps):
                for lst in lists:
                    yield from lst

    res = {}
    for nf in a.fields:
        ws = _widths(nf)

        class Src(torch.utils.data.Dataset):
            def __len__(self):
                return n

            def __getitem__(self, i):
                if nf == 1:
                    return torch.full((1, 28, 28), float(i))
                return {f"f{k}": torch.full((w,), float(i)) for k, w in enumerate(ws)}
        ds = DistDataset(Src(), f"ovh{nf}", comm, method=a.method)
        store = ds.ddstore
        fields = ds.schema.fields
        outs = [torch.empty((a.batch,) + tuple(f.row_shape)) for f in fields]
        tb = [torch.from_numpy(b) for b in batches]
        who = f"DistDataset '{ds.name}'"

        def bare(k):
            for f, o in zip(fields, outs):
                ext.get_batch(store, f.var, o, tb[k])

        def loader_epoch(help_="1"):
            # DDSTORE_LOADER_HELP is read when the loader is made
            os.environ["DDSTORE_LOADER_HELP"] = help_
            ld = ThreadDataLoader(ds, batch_size=a.batch, sampler=Batches(10), num_workers=1)
            it = iter(ld)
            os.environ.pop("DDSTORE_LOADER_HELP")
            next(it)                      # start-up (thread, first batch) not timed
            t0 = time.perf_counter()
            m = 1
            for _ in it:
                m += 1
            return (time.perf_counter() - t0) / (m - 1) * 1e6

        cases = {
            "bare": bare,
            "collate": lambda k: ds._collate(lists[k]),
            "seq_indices": lambda k: ext.seq_indices(lists[k], n, who),
            "alloc": lambda k: [torch.empty((a.batch,) + tuple(f.row_shape)) for f in fields],
            "read_rows": lambda k: ds.read_rows(batches[k]),
        }
        if nf == 1:
            np_out = np.empty((a.batch, 784), np.float32)
            cases["numpy_get_batch"] = lambda k: store.get_batch(fields[0].var, np_out,
                                                                  batches[k])
            cases["getitems"] = lambda k: ds.__getitems__(lists[k])
            cases["default_collate_getitems"] = \
                lambda k: default_collate(ds.__getitems__(lists[k]))
        r = {name: timed(fn) for name, fn in cases.items()}
        loads, loads0 = [], []
        for rep in range(a.reps):           # alternating: the consumer reads or not
            for h in (("1", "0") if rep % 2 == 0 else ("0", "1")):
                comm.Barrier()
                (loads if h == "1" else loads0).append(loader_epoch(h))
        r["thread_loader"] = {"median": statistics.median(loads), "min": min(loads)}
        r["thread_loader_nohelp"] = {"median": statistics.median(loads0), "min": min(loads0)}
        res[str(nf)] = r
        ds.free()
    allres = comm.gather(res, root=0)
    if comm.Get_rank() == 0:
        _write(a.result, {"ranks": comm.Get_size(), "batch": a.batch, "row_bytes": 3136,
                          "rows": n, "fields": a.fields, "per_rank": allres})


_OVH_LABELS = {
    "bare": "bare tensor get_batch, one per field (preallocated)",
    "collate": "direct collate ds._collate(list) (ThreadDataLoader)",
    "thread_loader": "ThreadDataLoader, 1 worker, per batch delivered (640/epoch)",
    "thread_loader_nohelp": "  the same, DDSTORE_LOADER_HELP=0 (only the worker reads)",
    "read_rows": "ds.read_rows (allocates)",
    "numpy_get_batch": "PyDDStore.get_batch (numpy out, preallocated)",
    "getitems": "ds.__getitems__ (list of 128 samples)",
    "default_collate_getitems": "default_collate(ds.__getitems__) (DataLoader)",
    "seq_indices": "  part: indices list -> int64 tensor + range check",
    "alloc": "  part: allocating the batch tensors",
}


def run_overhead(args):
    out = {}
    for ranks in (1, args.ovh_ranks):
        r = _launch("overhead", ranks, ["--batch", "128", "--reps", str(args.reps_ovh),
                                        "--rows", str(args.rows), "--method",
                                        str(args.method), "--fields"] +
                    [str(f) for f in args.fields], 900)
        out[ranks] = r
        for nf in r["fields"]:
            per = [p[str(nf)] for p in r["per_rank"]]

            def val(case, stat="min"):
                return max(p[case][stat] for p in per)
            bare = val("bare")
            print(f"\n(3) batch of 128 samples x 3136 bytes in {nf} field(s), method "
                  f"{args.method}, {ranks} rank(s) ({'all local' if ranks == 1 else 'mostly remote'}): "
                  f"us per batch, min (median) over {args.reps_ovh} reps of 64 batches, max over ranks")
            for case, label in _OVH_LABELS.items():
                if case not in per[0]:
                    continue
                v, m = val(case), val(case, "median")
                print(f"    {label:54s} {v:8.1f} ({m:8.1f})  {v / bare:5.2f}x bare")
            rest = val("collate") - bare - val("seq_indices") - val("alloc")
            print(f"    {'  part: the rest (Python call, structure, GIL)':54s} {rest:8.1f}")
    return {"overhead": out}


def _write(path, obj):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("part", nargs="?", default="all",
                    choices=("all", "memory", "vae", "overhead", "_memory", "_vae",
                             "_overhead"))
    ap.add_argument("--json", default=os.path.join(OUT, "bench_torch.json"))
    ap.add_argument("--result")
    ap.add_argument("--share-mib", type=float, default=400)
    ap.add_argument("--row-kib", type=int, default=64)
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--mem-ranks", type=int, default=2)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--ovh-ranks", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--reps-ovh", type=int, default=7)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--rows", type=int, default=60000)
    ap.add_argument("--method", type=int, default=0, help="ddstore method for (2) and (3)")
    ap.add_argument("--fields", type=int, nargs="+", default=[1, 3, 8],
                    help="(3): fields per sample (3136 bytes split among them)")
    a = ap.parse_args()
    if a.part.startswith("_"):
        {"_memory": part_memory, "_vae": part_vae, "_overhead": part_overhead}[a.part](a)
        return
    res = {"load_average": os.getloadavg(), "cpus": os.cpu_count(), "time": time.time()}
    if a.part in ("all", "memory"):
        res.update(run_memory(a))
    if a.part in ("all", "vae"):
        res.update(run_vae(a))
    if a.part in ("all", "overhead"):
        res.update(run_overhead(a))
    res["load_average_end"] = os.getloadavg()
    _write(a.json, res)
    print(f"\nload average {res['load_average'][0]:.1f} -> {res['load_average_end'][0]:.1f} "
          f"on {res['cpus']} CPUs; results in {a.json}")


if __name__ == "__main__":
    main()
