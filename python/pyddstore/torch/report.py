"""Where each epoch's time goes: the figures ThreadDataLoader keeps per epoch.

The consumer's wall time of an epoch (from ``iter(loader)`` to the
``StopIteration``) is split without gaps into

- ``start_s``: from ``iter(loader)`` to the first ``next()`` (worker start,
  first requests);
- ``wait_s``: inside ``next()``: waiting for data (and, with no worker
  threads, reading it);
- ``compute_s``: between batches: the training step.

so ``start_s + wait_s + compute_s == wall_s``.  The workers' side (time
fetching: read + collate + pin) and the store's read counters split the read
time as far as the store measures it.  The per-rank spread needs a collective
and is gathered only when asked.
"""

import json
import logging
import sys
import time

__all__ = ["EpochStats", "gather", "summary", "emit"]

log = logging.getLogger("pyddstore.torch.report")

# DistDataset.get_profile() counters that split the store's read time
_READ_NS = ("lock_wait_ns", "register_ns", "post_ns", "complete_ns", "gpu_sync_ns",
            "other_ns", "total_ns")
_READ_COUNT = ("calls", "rows", "bytes", "local_bytes", "reads")


def _profile(ds):
    get = getattr(ds, "get_profile", None)
    if get is None or getattr(ds, "ddstore", None) is None:
        return None
    try:
        p = get()
    except Exception:  # noqa: BLE001 - a freed or foreign dataset: no split
        return None
    return {k: p.get(k, 0) for k in _READ_NS + _READ_COUNT}


class EpochStats:
    """One epoch's figures (one ThreadDataLoader iterator).  Updated by the
    consumer thread (enter/leave) and by the worker threads (fetched(), under
    the iterator's condition lock)."""

    def __init__(self, index, dataset, workers, depth, t0=None):
        self.t0 = time.perf_counter() if t0 is None else t0    # iter(loader) called
        self.index = index
        self.workers = workers
        self.depth = depth
        self._dataset = dataset
        self._prof0 = _profile(dataset)
        self.t_end = None
        self._t_leave = None
        self.start_s = 0.0
        self.wait_s = 0.0
        self.compute_s = 0.0
        self.batches = 0
        self.samples = 0
        self.fetch_s = 0.0
        self.fetched = 0
        self.ready_sum = 0
        self.ready_min = None
        self.ready_max = 0
        self.starved = 0
        self.read = None

    def enter(self, ready):
        """The consumer enters next(); `ready` batches are on hand."""
        t = time.perf_counter()
        if self._t_leave is None:
            self.start_s = t - self.t0
        else:
            self.compute_s += t - self._t_leave
        if self.workers:
            self.ready_sum += ready
            self.ready_max = max(self.ready_max, ready)
            self.ready_min = ready if self.ready_min is None else min(self.ready_min, ready)
            self.starved += ready == 0
        return t

    def leave(self, t_enter, samples):
        """next() returns a batch of `samples` samples (None: the epoch ended;
        returns True the first time)."""
        first_end = samples is None and self.t_end is None
        if first_end:             # (inside the last next(): counted as waiting)
            p1 = _profile(self._dataset)
            if p1 is not None and self._prof0 is not None:
                self.read = {k: p1[k] - self._prof0[k] for k in p1}
        t = time.perf_counter()
        self.wait_s += t - t_enter
        self._t_leave = t
        if samples is None:
            if first_end:
                self.t_end = t
            return first_end
        if samples < 0:                                 # next() raised
            return False
        self.batches += 1
        self.samples += samples
        return False

    def add_fetch(self, seconds):
        self.fetch_s += seconds
        self.fetched += 1

    def figures(self):
        """A plain dict (JSON-ready)."""
        now = self.t_end if self.t_end is not None else time.perf_counter()
        wall = now - self.t0
        b = max(self.batches, 1)
        d = {"epoch": self.index, "complete": self.t_end is not None,
             "wall_s": wall, "start_s": self.start_s, "wait_s": self.wait_s,
             "compute_s": self.compute_s, "batches": self.batches, "samples": self.samples,
             "wait_fraction": self.wait_s / wall if wall > 0 else 0.0,
             "wait_per_batch_ms": 1e3 * self.wait_s / b,
             "compute_per_batch_ms": 1e3 * self.compute_s / b,
             "workers": self.workers, "prefetch_depth": self.depth,
             "fetch_s": self.fetch_s, "fetched": self.fetched,
             "fetch_per_batch_ms": 1e3 * self.fetch_s / max(self.fetched, 1)}
        if self.workers:
            d.update(prefetched_mean=self.ready_sum / b, prefetched_min=self.ready_min or 0,
                     prefetched_max=self.ready_max, starved_batches=self.starved)
        if self.read is not None:
            r = dict(self.read)
            for k in _READ_NS:
                r[k[:-3] + "_s"] = r.pop(k) / 1e9
            d["read"] = r
        return d


def gather(fig, comm):
    """Add the per-rank spread to `fig` (collective over `comm`: a pyddstore
    Comm, an mpi4py communicator, "torch" for torch.distributed's world, or
    None for this process alone)."""
    # integer nanoseconds: pyddstore's Comm carries ints, not floats
    keys = ("wall_s", "wait_s", "compute_s", "fetch_s")
    mine = [int(round(fig[k] * 1e9)) for k in keys] + [int(fig["batches"])]
    if comm is None:
        alls = [mine]
        rank = 0
    elif comm == "torch":
        import torch.distributed as dist
        alls = [None] * dist.get_world_size()
        dist.all_gather_object(alls, mine)
        rank = dist.get_rank()
    elif hasattr(comm, "Get_rank"):
        alls, rank = comm.allgather(mine), comm.Get_rank()
    else:
        alls, rank = comm.allgather(mine), comm.rank
    alls = [dict(zip(keys, (v / 1e9 for v in a[:4])), batches=a[4]) for a in alls]
    waits = [a["wait_s"] for a in alls]
    slow = max(range(len(waits)), key=waits.__getitem__)
    mean = sum(waits) / len(waits)
    out = dict(fig)
    out.update(rank=rank, ranks=len(alls),
               per_rank={k: [a[k] for a in alls] for k in keys + ("batches",)},
               slowest_rank=slow, wait_max_s=waits[slow], wait_mean_s=mean,
               wait_spread_s=waits[slow] - min(waits))
    return out


def summary(fig):
    """The one-screen text of gathered figures."""
    w = fig["wall_s"] or 1e-12
    lines = [f"ddstore loader epoch {fig['epoch']}: {fig['batches']} batches, "
             f"{fig['samples']} samples, {fig['wall_s']:.3f} s"
             + (f" (rank {fig['rank']} of {fig['ranks']})" if "ranks" in fig else ""),
             f"  waiting for data {fig['wait_s']:9.3f} s  {100 * fig['wait_s'] / w:5.1f} %  "
             f"({fig['wait_per_batch_ms']:.3f} ms/batch)",
             f"  between batches  {fig['compute_s']:9.3f} s  {100 * fig['compute_s'] / w:5.1f} %  "
             f"({fig['compute_per_batch_ms']:.3f} ms/batch)",
             f"  start            {fig['start_s']:9.3f} s  {100 * fig['start_s'] / w:5.1f} %"]
    if fig["workers"]:
        lines.append(f"  workers {fig['workers']}: fetching {fig['fetch_s']:.3f} s "
                     f"({fig['fetch_per_batch_ms']:.3f} ms/batch); prefetched on hand "
                     f"mean {fig['prefetched_mean']:.1f} of {fig['prefetch_depth']}, "
                     f"{fig['starved_batches']} batches found none")
    r = fig.get("read")
    if r:
        lines.append("  store reads: " + ", ".join(
            f"{k[:-2]} {r[k]:.3f} s" for k in ("post_s", "complete_s", "lock_wait_s",
                                               "register_s", "gpu_sync_s", "other_s")
            if r.get(k)) + f" (total {r.get('total_s', 0):.3f} s, {r.get('rows', 0)} rows)")
    if "ranks" in fig and fig["ranks"] > 1:
        lines.append(f"  slowest rank {fig['slowest_rank']}: waited {fig['wait_max_s']:.3f} s "
                     f"(mean {fig['wait_mean_s']:.3f} s, spread {fig['wait_spread_s']:.3f} s)")
    return "\n".join(lines)


def emit(fig, target):
    """Rank 0's output at epoch end: the summary through the logger (a stderr
    handler is added when logging is not configured), and with a path a JSON
    line appended to that file."""
    if not log.hasHandlers():
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(h)
        log.propagate = False
    if log.level == logging.NOTSET:
        log.setLevel(logging.INFO)
    log.info("%s", summary(fig))
    if isinstance(target, str):
        with open(target, "a") as f:
            f.write(json.dumps(fig) + "\n")
