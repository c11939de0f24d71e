#!/usr/bin/env python3
"""End to end: ddstore's loader against what users would pick instead (issue 14, part 4).

    .venv/bin/python tools/bench_loaders.py                 # both datasets, every loader here
    .venv/bin/python tools/bench_loaders.py --quick         # small: a few seconds per case
    .venv/bin/python tools/bench_loaders.py --datasets synthetic --synthetic-n 200000

One epoch at --ranks (default 4) ranks, each case a fresh job under tools/ddrun:

  ddstore-m0, ddstore-m1   ThreadDataLoader (1 worker thread) over a DistDataset, method 0
                           or 1, DistributedSampler: each rank stores 1/N of the data
  torch-w0, torch-w2       torch DataLoader over an in-memory copy of the whole dataset on
                           every rank (the usual baseline: N copies per node),
                           DistributedSampler, num_workers 0 / 2
  torchdata-w0, -w2        torchdata's StatefulDataLoader, otherwise as torch-w*
  mosaic-w0, mosaic-w2     Mosaic Streaming: shards written once to local disk (MDSWriter,
                           a temporary directory), StreamingDataset over them (its
                           shared-memory coordination, 4 ranks), StreamingDataLoader

Per case the epochs are timed: a first one (start-up effects), then --reps (3)
delivering batches to a loop that does no compute, then --reps to a loop that does a
fixed amount (per batch: x.float() @ W with W of (row bytes, --compute-cols) float32,
one thread). samples/s = samples delivered on all ranks / the slowest rank's epoch
time; the median epoch of each kind is reported (all are in the JSON).
Memory per rank: peak RSS (ru_maxrss of the rank and, separately, of its forked
workers) and the peak PSS during the epochs (sampled from /proc/*/smaps_rollup every
50 ms, the rank and its worker processes: shared pages counted once over the node);
per node: the sum over ranks. Mosaic's shard files sit in the page cache (once per
node, not in any process's RSS): their size is recorded too. What the harness keeps for
its checks (indices, first and last batches) is in buffers mapped before the epochs
(class Kept), not on the heap, where it made the PSS of a run depend on where glibc
put it.

Every delivered batch is checked: each sample carries its index, the indices of an
epoch over all ranks must cover the dataset, and the first and last batch of each
epoch on each rank must equal the source's samples (a loader that delivers wrong
samples is reported as failed, not measured).

Loaders not installed are skipped with the reason (pip names: torchdata,
mosaicml-streaming; `./ddstore bench` installs them). The in-memory baselines are
skipped when N copies of the dataset would not fit in 80 % of MemAvailable.
Results: OUT/bench_loaders.json (commit, settings, load average) and OUT/bench_loaders.png.
"""
import argparse
import gc
import importlib.util
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import types

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(TOP, "python"))
sys.path.insert(0, os.path.join(TOP, "examples"))
DDRUN = os.path.join(TOP, "tools", "ddrun")
FMNIST_DIR = "/usr/share/datasets/fashion-mnist"

CASES = ("ddstore-m0", "ddstore-m1", "torch-w0", "torch-w2", "torchdata-w0",
         "torchdata-w2", "mosaic-w0", "mosaic-w2")


# ------------------------------------------------------------- datasets ---
def synthetic_rows(idx, row_bytes):
    """Rows `idx` (int64 array) of the synthetic dataset: a byte pattern that
    depends on the index and the column."""
    import numpy as np
    idx = np.asarray(idx, dtype=np.int64)
    cols = np.arange(row_bytes, dtype=np.int64)
    return ((idx[:, None] * 131 + cols[None, :] * 7 + (idx[:, None] >> 8)) % 251).astype(np.uint8)


class Data:
    """A dataset's rows on demand: x (uint8 [row_bytes]), y (label), and the
    index (every sample carries it, for the checks)."""

    def __init__(self, name, n, row_bytes, fmnist_dir):
        import numpy as np
        self.name = name
        if name == "fmnist":
            import mnist_data
            images, labels = mnist_data.load(fmnist_dir, "train")
            self.images = images.reshape(len(images), -1)
            self.labels = labels.astype(np.int64)
            self.n = min(n, len(images)) if n else len(images)
            self.row_bytes = self.images.shape[1]
        else:
            self.images = None
            self.n = n
            self.row_bytes = row_bytes

    def rows(self, idx):
        import numpy as np
        idx = np.asarray(idx, dtype=np.int64)
        if self.images is not None:
            return self.images[idx], self.labels[idx]
        return synthetic_rows(idx, self.row_bytes), idx % 10

    def drop_source(self):
        """Let go of the source's own copy (Fashion-MNIST read from disk)."""
        self.images = self.labels = None


class OnTheFly:
    """Map-style source for DistDataset: sample i made when asked (each rank
    makes only its share)."""

    def __init__(self, data):
        self.data = data

    def __len__(self):
        return self.data.n

    def __getitem__(self, i):
        import torch
        x, y = self.data.rows([i])
        return torch.from_numpy(x[0]), int(y[0]), int(i)


def in_memory_copy(data, chunk=8192):
    """The whole dataset in this process's memory (the baseline)."""
    import numpy as np
    import torch
    x = np.empty((data.n, data.row_bytes), np.uint8)
    y = np.empty(data.n, np.int64)
    for s in range(0, data.n, chunk):
        x[s:s + chunk], y[s:s + chunk] = data.rows(np.arange(s, min(data.n, s + chunk)))
    return torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y),
                                          torch.arange(data.n))


# ---------------------------------------------------- optional loaders ---
def import_streaming():
    """Mosaic Streaming's StreamingDataset, StreamingDataLoader, MDSWriter and
    its stale-shared-memory cleaner, or (None, reason). `import streaming`
    also imports its vision helpers, which need a torchvision built for the
    installed torch (PyPI's wheels are CUDA builds that do not load next to a
    CPU-only torch); then the same classes are taken from streaming.base
    without the package's __init__."""
    if "streaming" not in _IMPORTED:
        _IMPORTED["streaming"] = _import_streaming()
    return _IMPORTED["streaming"]


_IMPORTED = {}


def _import_streaming():
    if importlib.util.find_spec("streaming") is None:
        return None, "mosaicml-streaming not installed (pip install mosaicml-streaming)"
    try:
        import streaming  # noqa: F401
        why = None
    except Exception as e:  # noqa: BLE001 - any import failure: try the base package
        why = f"{type(e).__name__}: {e}"
        for k in [k for k in sys.modules if k == "streaming" or k.startswith("streaming.")]:
            del sys.modules[k]
        spec = importlib.util.find_spec("streaming")
        pkg = types.ModuleType("streaming")
        pkg.__path__ = list(spec.submodule_search_locations)
        pkg.__spec__ = spec
        sys.modules["streaming"] = pkg
    try:
        from streaming.base import MDSWriter, StreamingDataLoader, StreamingDataset
        from streaming.base.util import clean_stale_shared_memory
    except Exception as e:  # noqa: BLE001
        return None, (f"mosaicml-streaming does not import here: {type(e).__name__}: {e}"
                      + (f" (import streaming: {why})" if why else ""))
    import streaming._version as v
    return types.SimpleNamespace(MDSWriter=MDSWriter, StreamingDataset=StreamingDataset,
                                 StreamingDataLoader=StreamingDataLoader,
                                 clean=clean_stale_shared_memory, version=v.__version__,
                                 note=(f"imported from streaming.base ({why})" if why else "")), None


def import_torchdata():
    if importlib.util.find_spec("torchdata") is None:
        return None, "torchdata not installed (pip install torchdata)"
    try:
        from torchdata.stateful_dataloader import StatefulDataLoader
        import torchdata
    except Exception as e:  # noqa: BLE001
        return None, f"torchdata does not import here: {type(e).__name__}: {e}"
    return types.SimpleNamespace(StatefulDataLoader=StatefulDataLoader,
                                 version=getattr(torchdata, "__version__", "?")), None


def write_mds(data, path, chunk=4096):
    """Mosaic shards of `data` in `path`; returns (seconds, bytes on disk)."""
    import numpy as np
    ms, why = import_streaming()
    if ms is None:
        raise RuntimeError(why)
    t0 = time.perf_counter()
    cols = {"x": f"ndarray:uint8:{data.row_bytes}", "y": "int64", "idx": "int64"}
    with ms.MDSWriter(out=path, columns=cols, size_limit="64mb") as w:
        for s in range(0, data.n, chunk):
            idx = np.arange(s, min(data.n, s + chunk))
            x, y = data.rows(idx)
            for k in range(len(idx)):
                w.write({"x": x[k], "y": y[k], "idx": idx[k]})
    secs = time.perf_counter() - t0
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
    return secs, size


# --------------------------------------------------------------- memory ---
def _pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children(pid):
    out = []
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


class PssSampler:
    """Peak PSS of this process and its children (forked loader workers),
    sampled every `period` s while running."""

    def __init__(self, period=0.05):
        self.period = period
        self.peak_kib = 0
        self._stop = threading.Event()
        self._t = None

    def sample(self):
        me = os.getpid()
        total = _pss_kib(me) + sum(_pss_kib(c) for c in _children(me))
        self.peak_kib = max(self.peak_kib, total)

    def _run(self):
        while not self._stop.wait(self.period):
            self.sample()

    def start(self):
        self.sample()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def stop(self):
        self._stop.set()
        self._t.join()
        self.sample()


def _maxrss_mib(who):
    return resource.getrusage(who).ru_maxrss / 1024.0


class Kept:
    """What the harness keeps of the epochs for its checks (the indices each rank
    was given, the first and last batch of each epoch), in buffers mapped once
    before the epochs, outside the allocator's heap. Kept per batch on the heap
    (a list of index tensors, copies of batches), these small long-lived blocks
    landed in the holes that the training step's temporaries leave and held them
    apart: the heap grew in some ranks of some runs and not others, and the node
    PSS of a loader moved by up to 400 MiB between runs of the same code
    (docs/measurements.md, "the harness's records in glibc's heap")."""

    def __init__(self, epochs, max_seen, batch, row_bytes):
        import mmap
        import numpy as np
        self.batch = batch

        def arr(shape, dtype):     # the array keeps its mapping alive
            n = int(np.prod(shape))
            m = mmap.mmap(-1, max(1, n * np.dtype(dtype).itemsize))
            return np.frombuffer(m, dtype, n).reshape(shape)
        self.seen = arr((max_seen,), np.int64)
        self.x = arr((epochs, 2, batch, row_bytes), np.uint8)
        self.y = arr((epochs, 2, batch), np.int64)
        self.idx = arr((epochs, 2, batch), np.int64)
        self.len = arr((epochs, 2), np.int64)
        self.len[:] = -1

    def seen_add(self, at, idx):
        import numpy as np
        idx = np.asarray(idx).reshape(-1)
        if at + len(idx) > len(self.seen):
            raise RuntimeError(f"bench_loaders: a rank was given more than {len(self.seen)} "
                               "samples in one epoch")
        self.seen[at:at + len(idx)] = idx
        return at + len(idx)

    def end(self, ep, k, x, y, idx):
        import numpy as np
        b = len(idx)
        if b > self.batch:
            raise RuntimeError(f"bench_loaders: a batch of {b} samples, --batch is {self.batch}")
        self.x[ep, k, :b] = np.asarray(x).reshape(b, -1)
        self.y[ep, k, :b] = np.asarray(y)
        self.idx[ep, k, :b] = np.asarray(idx)
        self.len[ep, k] = b

    def ends(self, ep):
        for k in range(2):
            b = int(self.len[ep, k])
            if b >= 0:
                yield self.x[ep, k, :b], self.y[ep, k, :b], self.idx[ep, k, :b]


# ------------------------------------------------------------- the case ---
def _init_torch_dist(comm):
    """torch.distributed over gloo on this node (loopback), as a DDP job has it:
    Mosaic Streaming reads its world from RANK/WORLD_SIZE/LOCAL_* and
    synchronises its ranks through torch.distributed."""
    import socket
    import torch.distributed as dist
    r, n = comm.Get_rank(), comm.Get_size()
    port = None
    if r == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    port = comm.bcast(port, root=0)
    for k, v in (("RANK", r), ("WORLD_SIZE", n), ("LOCAL_RANK", r), ("LOCAL_WORLD_SIZE", n),
                 ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", port)):
        os.environ[k] = str(v)
    dist.init_process_group("gloo", rank=r, world_size=n)


def part_case(a):
    import numpy as np
    import torch
    from mpi4py import MPI
    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    kind, _, variant = a.case.partition("-")
    workers = int(variant[1:]) if variant.startswith("w") else a.ddstore_workers
    import warnings
    # known, harmless here: Mosaic's read-only sample arrays, torchdata's set_vital
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
    # the case's modules first: "before load" is the process with its imports
    if kind == "ddstore":
        import pyddstore.torch  # noqa: F401
    elif kind == "torchdata":
        import_torchdata()
    elif kind == "mosaic":
        import_streaming()
    rss0 = _maxrss_mib(resource.RUSAGE_SELF)
    pss0 = _pss_kib(os.getpid()) / 1024.0
    data = Data(a.dataset, a.n, a.row_bytes, a.fmnist_dir)
    comm.Barrier()
    t0 = time.perf_counter()
    ds = None
    info = {}
    if kind == "ddstore":
        from pyddstore.torch import DistDataset, ThreadDataLoader, sampler_kwargs
        ds = DistDataset(OnTheFly(data), f"bench-{a.dataset}", comm, method=int(variant[1:]),
                         chunk_size=4096)
        data.drop_source()
        sampler = torch.utils.data.distributed.DistributedSampler(
            ds, shuffle=True, seed=a.seed, **sampler_kwargs(ds))
        make = lambda: ThreadDataLoader(ds, batch_size=a.batch, sampler=sampler,  # noqa: E731
                                        num_workers=a.ddstore_workers)
        info["method"] = ds.method
        workers = a.ddstore_workers
    elif kind in ("torch", "torchdata"):
        ds = in_memory_copy(data)
        data.drop_source()
        sampler = torch.utils.data.distributed.DistributedSampler(
            ds, num_replicas=size, rank=rank, shuffle=True, seed=a.seed)
        cls = torch.utils.data.DataLoader
        if kind == "torchdata":
            td, why = import_torchdata()
            if td is None:
                raise RuntimeError(why)
            cls = td.StatefulDataLoader
            info["torchdata"] = td.version
        make = lambda: cls(ds, batch_size=a.batch, sampler=sampler,  # noqa: E731
                           num_workers=workers)
    elif kind == "mosaic":
        ms, why = import_streaming()
        if ms is None:
            raise RuntimeError(why)
        _init_torch_dist(comm)
        ms.clean()
        data.drop_source()
        ds = ms.StreamingDataset(local=a.mds, remote=None, shuffle=True, shuffle_seed=a.seed,
                                 batch_size=a.batch)
        make = lambda: ms.StreamingDataLoader(ds, batch_size=a.batch,  # noqa: E731
                                              num_workers=workers)
        sampler = None
        info["streaming"] = ms.version
        if ms.note:
            info["streaming_note"] = ms.note
    else:
        raise SystemExit(f"bench_loaders: unknown case {a.case!r}")
    load_s = time.perf_counter() - t0
    comm.Barrier()

    # the fixed compute: x.float() @ W per batch, timed alone first
    w = torch.randn(data.row_bytes, a.compute_cols) / data.row_bytes
    xb = torch.randint(0, 255, (a.batch, data.row_bytes), dtype=torch.uint8)

    def compute(x):
        return float(torch.relu(x.reshape(len(x), -1).float() @ w).sum())
    compute(xb)
    tc = time.perf_counter()
    for _ in range(10):
        compute(xb)
    compute_ms = (time.perf_counter() - tc) / 10 * 1e3

    plan = [("first", False)] + [("no compute", False)] * a.reps + [("compute", True)] * a.reps
    kept = Kept(len(plan), data.n + 2 * a.batch, a.batch, data.row_bytes)
    pss = PssSampler()
    pss.start()
    epochs = []
    for ep, (label, do_compute) in enumerate(plan):
        if sampler is not None:
            sampler.set_epoch(ep)                         # StreamingDataset counts its own
        loader = make()
        nseen, nb = 0, 0
        comm.Barrier()
        t = time.perf_counter()
        for batch in loader:
            if isinstance(batch, dict):
                x, y, idx = batch["x"], batch["y"], batch["idx"]
            else:
                x, y, idx = batch
            if do_compute:
                compute(x)
            nseen = kept.seen_add(nseen, idx)
            if nb == 0:
                first = (x, y, idx)   # held to the end: a batch overwritten while
            last = (x, y, idx)        # still held (pool reuse) fails the content check
            nb += 1
        secs = time.perf_counter() - t
        if nb:
            kept.end(ep, 0, *first)
            kept.end(ep, 1, *last)
            del first, last
        if hasattr(loader, "close"):
            loader.close()
        del loader
        allseen = comm.gather(kept.seen[:nseen].copy(), root=0)
        stats = comm.gather({"seconds": secs, "samples": nseen, "batches": nb},
                            root=0)
        if rank == 0:
            every = np.concatenate(allseen)
            distinct = int(len(np.unique(every)))
            covered = distinct == data.n and int(every.min()) == 0 and \
                int(every.max()) == data.n - 1
            total = sum(s["samples"] for s in stats)
            slowest = max(s["seconds"] for s in stats)
            epochs.append({"epoch": label, "compute": do_compute, "per_rank": stats,
                           "samples": total, "seconds": slowest,
                           "samples_per_s": total / slowest if slowest > 0 else 0.0,
                           "distinct": distinct, "covered": covered})
        del allseen
        gc.collect()
    pss.stop()
    peak_rss = _maxrss_mib(resource.RUSAGE_SELF)
    # the content checks, after the memory figures: the first and last batch
    # of every epoch against the source
    ref = Data(a.dataset, a.n, a.row_bytes, a.fmnist_dir)
    content = []
    for ep in range(len(plan)):
        ok = True
        for x, y, idx in kept.ends(ep):
            ex, ey = ref.rows(idx)
            ok &= bool(np.array_equal(x, ex) and np.array_equal(y, ey))
        content.append(ok)
    content = comm.gather(content, root=0)
    if rank == 0:
        for k, e in enumerate(epochs):
            e["content_ok"] = all(c[k] for c in content)
    mem = comm.gather({"rank": rank, "rss_before_load_mib": rss0, "pss_before_load_mib": pss0,
                       "peak_rss_mib": peak_rss,
                       "peak_rss_workers_mib": _maxrss_mib(resource.RUSAGE_CHILDREN),
                       "peak_pss_epochs_mib": pss.peak_kib / 1024.0,
                       "load_s": load_s}, root=0)
    if kind == "ddstore":
        ds.free()
    if kind == "mosaic":
        import torch.distributed as dist
        dist.destroy_process_group()
    if rank == 0:
        _write(a.result, {"case": a.case, "dataset": a.dataset, "ranks": size, "n": data.n,
                          "row_bytes": data.row_bytes, "batch": a.batch, "workers": workers,
                          "compute_ms_per_batch": compute_ms, "compute_cols": a.compute_cols,
                          "epochs": epochs, "memory": mem,
                          "node_peak_rss_mib": sum(m["peak_rss_mib"] + m["peak_rss_workers_mib"]
                                                   for m in mem),
                          "node_peak_pss_mib": sum(m["peak_pss_epochs_mib"] for m in mem),
                          "node_peak_pss_above_start_mib": sum(
                              m["peak_pss_epochs_mib"] - m["pss_before_load_mib"] for m in mem),
                          "load_s": max(m["load_s"] for m in mem), **info})


# --------------------------------------------------------------- driver ---
def _write(path, obj):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)


def _mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def _git(*args):
    return subprocess.run(["git", *args], cwd=TOP, capture_output=True, text=True).stdout.strip()


def launch(a, case, dataset, n, mds):
    res = os.path.join(a.out, f"_{case}_{dataset}_{os.getpid()}.json")
    cmd = [DDRUN, "-n", str(a.ranks), "--timeout", str(a.timeout), "--", sys.executable,
           os.path.abspath(__file__), "_case", "--case", case, "--dataset", dataset,
           "--n", str(n), "--row-bytes", str(a.row_bytes), "--batch", str(a.batch),
           "--compute-cols", str(a.compute_cols), "--ddstore-workers", str(a.ddstore_workers),
           "--seed", str(a.seed), "--reps", str(a.reps), "--fmnist-dir", a.fmnist_dir, "--result", res]
    if mds:
        cmd += ["--mds", mds]
    print("+ " + " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    rc = subprocess.call(cmd, cwd=TOP)
    if rc != 0 or not os.path.exists(res):
        return {"case": case, "dataset": dataset, "failed": f"job exited {rc}",
                "wall_s": time.perf_counter() - t0}
    with open(res) as f:
        out = json.load(f)
    os.unlink(res)
    out["wall_s"] = time.perf_counter() - t0
    bad = [e["epoch"] for e in out["epochs"] if not (e["covered"] and e["content_ok"])]
    if bad:
        out["failed"] = f"wrong samples delivered in epoch(s) {', '.join(bad)}"
    return out


def _epoch(r, label):
    """The median epoch of that kind (by samples/s)."""
    es = sorted((e for e in r.get("epochs", ()) if e["epoch"] == label),
                key=lambda e: e["samples_per_s"])
    return es[len(es) // 2] if es else None


def print_table(results):
    print(f"\n{'dataset':9s} {'case':13s} {'no compute':>11s} {'compute':>9s} "
          f"{'node PSS':>9s} {'(+data)':>9s} {'node RSS':>9s} {'rank RSS':>9s}  (samples/s; MiB)")
    for r in results:
        if "skipped" in r or "failed" in r:
            print(f"{r['dataset']:9s} {r['case']:13s} "
                  f"{'SKIP: ' + r['skipped'] if 'skipped' in r else 'FAILED: ' + r['failed']}")
            continue
        nc, c = _epoch(r, "no compute"), _epoch(r, "compute")
        rank_rss = max(m["peak_rss_mib"] for m in r["memory"])
        print(f"{r['dataset']:9s} {r['case']:13s} {nc['samples_per_s']:11.0f} "
              f"{c['samples_per_s']:9.0f} {r['node_peak_pss_mib']:9.0f} "
              f"{r['node_peak_pss_above_start_mib']:9.0f} "
              f"{r['node_peak_rss_mib']:9.0f} {rank_rss:9.0f}")


def markdown(results, run):
    """The table as Markdown (for docs/measurements.md)."""
    out = [f"commit `{run['commit']}`, load average {run['loadavg_start'][0]:.1f} -> "
           f"{run['loadavg_end'][0]:.1f} on {run['cpus']} CPUs", "",
           "| dataset | loader | samples/s, no compute | samples/s, compute | node: sum of "
           "peak PSS, MiB (added by data + loader) | peak RSS per rank, MiB |",
           "|---|---|---|---|---|---|"]
    for r in results:
        if "skipped" in r or "failed" in r:
            out.append(f"| {r['dataset']} | {r['case']} | "
                       + ("skipped: " + r["skipped"] if "skipped" in r else
                          "FAILED: " + r["failed"]) + " | | | |")
            continue
        extra = (f"; + {r['shard_bytes'] / 2**20:.0f} MiB of shard files in the page cache"
                 if "shard_bytes" in r else "")
        out.append(f"| {r['dataset']} ({r['n']} × {r['row_bytes']} B) | {r['case']} | "
                   f"{_epoch(r, 'no compute')['samples_per_s']:.0f} | "
                   f"{_epoch(r, 'compute')['samples_per_s']:.0f} | "
                   f"{r['node_peak_pss_mib']:.0f} (+{r['node_peak_pss_above_start_mib']:.0f}"
                   f"{extra}) | {max(m['peak_rss_mib'] for m in r['memory']):.0f} |")
    return "\n".join(out) + "\n"


def plot(results, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        print("matplotlib missing: no plot")
        return
    dsets = sorted({r["dataset"] for r in results})
    fig, axes = plt.subplots(len(dsets), 3, figsize=(16, 4.5 * len(dsets)), squeeze=False)
    colours = {"ddstore": "tab:blue", "torch": "tab:orange", "torchdata": "tab:green",
               "mosaic": "tab:purple"}
    for row, dset in zip(axes, dsets):
        rs = [r for r in results if r["dataset"] == dset and "epochs" in r and "failed" not in r]
        names = [r["case"] for r in rs]
        col = [colours.get(n.split("-")[0], "grey") for n in names]
        y = list(range(len(rs)))
        for ax, vals, title in (
                (row[0], [_epoch(r, "no compute")["samples_per_s"] for r in rs],
                 "samples/s, loop without compute"),
                (row[1], [_epoch(r, "compute")["samples_per_s"] for r in rs],
                 "samples/s, loop with fixed compute")):
            ax.barh(y, vals, color=col)
            for k, v in enumerate(vals):
                ax.text(v, k, f" {v:.0f}", va="center", fontsize=8)
            ax.set_title(f"{dset}: {title}", fontsize=10)
        # memory: the processes at start (imports) and what the data and
        # the loader added, summed over the node's ranks
        start = [r["node_peak_pss_mib"] - r["node_peak_pss_above_start_mib"] for r in rs]
        above = [r["node_peak_pss_above_start_mib"] for r in rs]
        row[2].barh(y, start, color="lightgrey")
        row[2].barh(y, above, left=start, color=col)
        for k, (s0, v) in enumerate(zip(start, above)):
            row[2].text(s0 + v, k, f" {s0 + v:.0f} (+{v:.0f})", va="center", fontsize=8)
        row[2].set_title(f"{dset}: memory per node, sum of peak PSS (MiB)\n"
                         "grey: the processes after imports; colour: added by data + loader",
                         fontsize=9)
        for ax in row:
            ax.margins(x=0.18)
            ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(
                lambda v, _: f"{v / 1000:g}k" if v >= 1000 else f"{v:g}"))
            ax.set_yticks(y)
            ax.set_yticklabels(names)
            ax.invert_yaxis()
            ax.grid(True, axis="x", alpha=0.3)
        if rs:
            r0 = rs[0]
            row[0].set_ylabel(f"{r0['n']} x {r0['row_bytes']} B, {r0['ranks']} ranks, "
                              f"batch {r0['batch']}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"plot: {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("part", nargs="?", default="run", choices=("run", "_case"))
    ap.add_argument("--out", default=os.path.join(TOP, "out", "bench_loaders"))
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--datasets", default="fmnist,synthetic")
    ap.add_argument("--cases", default=",".join(CASES), help="comma list of: " + ", ".join(CASES))
    ap.add_argument("--synthetic-n", type=int, default=1_000_000)
    ap.add_argument("--fmnist-n", type=int, default=0, help="first N Fashion-MNIST samples (0: all)")
    ap.add_argument("--row-bytes", type=int, default=3072, help="synthetic row bytes")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--compute-cols", type=int, default=256)
    ap.add_argument("--ddstore-workers", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reps", type=int, default=3,
                    help="epochs of each kind after the first; the median is reported")
    ap.add_argument("--timeout", type=int, default=1800, help="per job, seconds")
    ap.add_argument("--fmnist-dir", default=FMNIST_DIR)
    ap.add_argument("--quick", action="store_true",
                    help="small: 6000 Fashion-MNIST and 20000 synthetic samples")
    # _case
    ap.add_argument("--case")
    ap.add_argument("--dataset")
    ap.add_argument("--n", type=int, default=0)
    ap.add_argument("--mds")
    ap.add_argument("--result")
    a = ap.parse_args()
    if a.part == "_case":
        try:
            part_case(a)
        except BaseException:
            # one rank's failure ends the whole job (the others may be waiting
            # in a collective call): print it, then abort every rank
            import traceback
            traceback.print_exc()
            sys.stderr.flush()
            from mpi4py import MPI
            MPI.COMM_WORLD.Abort(1)
        return 0
    if a.quick:
        a.synthetic_n = min(a.synthetic_n, 20000)
        a.fmnist_n = a.fmnist_n or 6000
    cases = [c for c in a.cases.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    os.makedirs(a.out, exist_ok=True)
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    run = {"commit": _git("rev-parse", "--short", "HEAD") + ("+dirty" if dirty else ""),
           "loadavg_start": os.getloadavg(), "cpus": os.cpu_count(),
           "mem_available_start": _mem_available(), "argv": sys.argv[1:],
           "settings": {k: v for k, v in os.environ.items()
                        if k.startswith(("DDSTORE_", "FI_", "OMPI_MCA_"))},
           "time": time.time()}
    skip = {}
    _, why = import_torchdata()
    if why:
        skip["torchdata"] = why
    ms, why = import_streaming()
    if why:
        skip["mosaic"] = why
    elif ms.note:
        run["streaming_note"] = ms.note
    import pyddstore
    if not pyddstore.HAVE_MPI:
        skip["ddstore-m0"] = "this pyddstore has no MPI (method 0)"
    if not pyddstore.HAVE_OFI:
        skip["ddstore-m1"] = "this pyddstore has no libfabric (method 1)"
    results = []
    tmp = tempfile.mkdtemp(prefix="ddstore-bench-loaders-")
    try:
        for dset in [d for d in a.datasets.split(",") if d]:
            if dset == "fmnist":
                try:
                    data = Data("fmnist", a.fmnist_n, 0, a.fmnist_dir)
                except FileNotFoundError as e:
                    for c in cases:
                        results.append({"case": c, "dataset": dset,
                                        "skipped": f"Fashion-MNIST not found: {e}"})
                    continue
            elif dset == "synthetic":
                data = Data("synthetic", a.synthetic_n, a.row_bytes, None)
            else:
                ap.error(f"unknown dataset {dset!r} (fmnist, synthetic)")
            copy_bytes = data.n * (data.row_bytes + 16)
            mds = None
            for c in cases:
                kind = c.split("-")[0]
                why = skip.get(c) or skip.get(kind)
                if not why and kind in ("torch", "torchdata") and \
                        a.ranks * copy_bytes > 0.8 * _mem_available():
                    why = (f"{a.ranks} in-memory copies of {copy_bytes / 2**30:.1f} GiB do not "
                           f"fit in 80 % of MemAvailable "
                           f"({_mem_available() / 2**30:.1f} GiB)")
                if why:
                    print(f"SKIP: {dset} {c}: {why}", flush=True)
                    results.append({"case": c, "dataset": dset, "skipped": why})
                    continue
                if kind == "mosaic" and mds is None:
                    mds = os.path.join(tmp, f"mds-{dset}")
                    secs, size = write_mds(data, mds)
                    run.setdefault("mds", {})[dset] = {"write_s": secs, "bytes": size}
                    print(f"mosaic shards for {dset}: {size / 2**20:.0f} MiB written in "
                          f"{secs:.1f} s", flush=True)
                r = launch(a, c, dset, data.n, mds if kind == "mosaic" else None)
                if kind == "mosaic" and "failed" not in r:
                    r["shard_bytes"] = run["mds"][dset]["bytes"]
                results.append(r)
                if "failed" in r:
                    print(f"FAILED: {dset} {c}: {r['failed']}", flush=True)
            data.drop_source()
            if mds:
                shutil.rmtree(mds, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    run["loadavg_end"] = os.getloadavg()
    path = os.path.join(a.out, "bench_loaders.json")
    _write(path, {"run": run, "results": results})
    print_table(results)
    with open(os.path.join(a.out, "bench_loaders.md"), "w") as f:
        f.write(markdown(results, run))
    plot(results, os.path.join(a.out, "bench_loaders.png"))
    print(f"load average {run['loadavg_start'][0]:.1f} -> {run['loadavg_end'][0]:.1f} on "
          f"{run['cpus']} CPUs; results in {path}")
    return 1 if any("failed" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
