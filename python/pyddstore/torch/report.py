"""Where each epoch's time goes: the figures ThreadDataLoader keeps per epoch.

The consumer's wall time of an epoch (from ``iter(loader)`` to the
``StopIteration``) is split without gaps into

- ``start_s``: from ``iter(loader)`` to the first ``next()`` (worker start,
  first requests);
- ``wait_s``: inside ``next()``: waiting for data (and, with no worker
  threads, reading it);
- ``compute_s``: between batches: the training step.

so ``start_s + wait_s + compute_s == wall_s``.  The workers' side (time
fetching: read + collate + pin, with ``collate_s`` and ``pin_s`` measured
where they are separate steps) and the store's read counters split the read
time as far as the store measures it.  The per-rank spread needs a collective
and is gathered only when asked.

The last ``TIMELINE_BATCHES`` batches of an epoch are kept as a timeline
(the consumer's enter/leave times of ``next()``, each fetch's start/end and
worker), bounded memory; ``plot_timeline`` draws it as a PNG.
"""

import collections
import json
import logging
import sys
import time

__all__ = ["EpochStats", "Timed", "gather", "summary", "emit", "plot_timeline",
           "TIMELINE_BATCHES"]

TIMELINE_BATCHES = 2048     # batches (and fetches) kept per epoch for the timeline

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
        self.collate_s = 0.0
        self.pin_s = 0.0
        # (enter, leave) of each next() that returned a batch, and (worker,
        # start, end, collate+pin) of each fetch; seconds since t0
        self.batch_times = collections.deque(maxlen=TIMELINE_BATCHES)
        self.fetch_times = collections.deque(maxlen=TIMELINE_BATCHES)
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
        self.batch_times.append((t_enter - self.t0, t - self.t0))
        self.batches += 1
        self.samples += samples
        return False

    def add_fetch(self, t_start, t_end, collate=0.0, pin=0.0, worker=0):
        """One fetch (read + collate + pin) from t_start to t_end
        (perf_counter), of which `collate` and `pin` seconds were those steps."""
        self.fetch_s += t_end - t_start
        self.fetched += 1
        self.collate_s += collate
        self.pin_s += pin
        self.fetch_times.append((worker, t_start - self.t0, t_end - self.t0, collate + pin))

    def figures(self, timeline=False):
        """A plain dict (JSON-ready); timeline=True adds the kept batches'
        times ("timeline": {"batches": [[enter, leave]...], "fetches":
        [[worker, start, end, collate_pin]...]}, seconds since iter())."""
        now = self.t_end if self.t_end is not None else time.perf_counter()
        wall = now - self.t0
        compute = self.compute_s
        if self.t_end is None and self._t_leave is not None:
            compute += now - self._t_leave      # in progress or left: the step since
        b = max(self.batches, 1)
        d = {"epoch": self.index, "complete": self.t_end is not None,
             "wall_s": wall, "start_s": self.start_s, "wait_s": self.wait_s,
             "compute_s": compute, "batches": self.batches, "samples": self.samples,
             "wait_fraction": self.wait_s / wall if wall > 0 else 0.0,
             "wait_per_batch_ms": 1e3 * self.wait_s / b,
             "compute_per_batch_ms": 1e3 * compute / b,
             "workers": self.workers, "prefetch_depth": self.depth,
             "fetch_s": self.fetch_s, "fetched": self.fetched,
             "fetch_per_batch_ms": 1e3 * self.fetch_s / max(self.fetched, 1),
             "collate_s": self.collate_s, "pin_s": self.pin_s}
        if self.workers:
            d.update(prefetched_mean=self.ready_sum / b, prefetched_min=self.ready_min or 0,
                     prefetched_max=self.ready_max, starved_batches=self.starved)
        read = self.read
        if read is None and self.t_end is None and self._prof0 is not None:
            p1 = _profile(self._dataset)     # an epoch in progress (or left): reads so far
            if p1 is not None:
                read = {k: p1[k] - self._prof0[k] for k in p1}
        if read is not None:
            r = dict(read)
            for k in _READ_NS:
                r[k[:-3] + "_s"] = r.pop(k) / 1e9
            # planned reads (one per variable: 1 with pack_fields) and the
            # remote reads they posted, per batch
            r["calls_per_batch"] = r.get("calls", 0) / b
            r["reads_per_batch"] = r.get("reads", 0) / b
            d["read"] = r
        if timeline:
            d["timeline"] = {
                "batches": [[round(a, 6), round(b, 6)] for a, b in list(self.batch_times)],
                "fetches": [[w, round(a, 6), round(b, 6), round(c, 6)]
                            for w, a, b, c in list(self.fetch_times)]}
        return d


def comm_of(datasets):
    """The communicator for gather(): the first dataset's with an allgather,
    else torch.distributed's world when initialised, else None."""
    for d in datasets:
        c = getattr(d, "comm", None)
        if c is not None and hasattr(c, "allgather"):
            return c
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if dist.is_available() and dist.is_initialized():
        return "torch"
    return None


def _samples(batch):
    """Samples in a collated batch: the first dimension of its first tensor."""
    while isinstance(batch, (list, tuple)) and batch:
        batch = batch[0]
    if isinstance(batch, dict) and batch:
        return _samples(next(iter(batch.values())))
    shape = getattr(batch, "shape", None)
    return int(shape[0]) if shape else 1


class Timed:
    """Any loader (torch's DataLoader, ...) with ThreadDataLoader's report of
    the consumer's side: iterate it as the loader; ``epoch_report(gather=False)``
    as ThreadDataLoader's (no worker figures: the loader's workers are not
    seen).  ``dataset`` gives the store's read counters and the communicator."""

    def __init__(self, loader, dataset=None):
        self.loader = loader
        self.dataset = dataset if dataset is not None else getattr(loader, "dataset", None)
        self._stats = None
        self._epochs = 0

    def __len__(self):
        return len(self.loader)

    def __getattr__(self, name):
        return getattr(self.__dict__["loader"], name)

    def __iter__(self):
        stats = self._stats = EpochStats(self._epochs, self.dataset, 0, 0)
        self._epochs += 1
        it = iter(self.loader)
        while True:
            t = stats.enter(0)
            try:
                batch = next(it)
            except StopIteration:
                stats.leave(t, None)
                return
            except BaseException:
                stats.leave(t, -1)
                raise
            stats.leave(t, _samples(batch))
            yield batch

    def epoch_report(self, gather=False, timeline=False):
        if self._stats is None:
            return None
        fig = self._stats.figures(timeline)
        return _gather(fig, comm_of([self.dataset])) if gather else fig


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


_gather = gather     # (for methods whose argument is named gather)


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
    if fig["fetched"]:
        split = ", ".join(f"{k} {fig[k + '_s']:.3f} s" for k in ("collate", "pin")
                          if fig.get(k + "_s"))
        lines.append(f"  fetching {fig['fetch_s']:.3f} s ({fig['fetch_per_batch_ms']:.3f} "
                     f"ms/batch" + (f"; of it {split}" if split else "") + ")")
    if fig["workers"]:
        lines.append(f"  workers {fig['workers']}: prefetched on hand "
                     f"mean {fig['prefetched_mean']:.1f} of {fig['prefetch_depth']}, "
                     f"{fig['starved_batches']} batches found none")
    r = fig.get("read")
    if r:
        lines.append("  store reads: " + ", ".join(
            f"{k[:-2]} {r[k]:.3f} s" for k in ("post_s", "complete_s", "lock_wait_s",
                                               "register_s", "gpu_sync_s", "other_s")
            if r.get(k)) + f" (total {r.get('total_s', 0):.3f} s, {r.get('rows', 0)} rows; "
            f"per batch {r.get('calls_per_batch', 0):.1f} planned reads, "
            f"{r.get('reads_per_batch', 0):.1f} remote reads)")
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


def _load(src):
    """Figures dicts from a dict, a list of dicts, or a JSON-lines path."""
    if isinstance(src, dict):
        return [src]
    if isinstance(src, (list, tuple)):
        return list(src)
    with open(src) as f:
        return [json.loads(line) for line in f if line.strip()]


def plot_timeline(src, path, epoch=None):
    """Draw where the time went as a PNG at `path`: for the epoch `epoch`
    (default the last one in `src` with a timeline) each kept batch's wait and
    compute on the consumer's row and each fetch on its worker's row (read,
    then collate + pin), and, with several epochs in `src`, each epoch's
    start / wait / compute split.  `src`: epoch_report(timeline=True)'s dict,
    a list of them, or a JSON-lines file (report= a path).  Returns `path`,
    or None (with a warning) when matplotlib is not installed."""
    figs = _load(src)
    if not figs:
        raise ValueError(f"plot_timeline: no epoch figures in {src!r}")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("plot_timeline: matplotlib is not installed (pip install matplotlib); "
                    "no plot written")
        return None
    with_tl = [f for f in figs if f.get("timeline") and f["timeline"]["batches"]]
    if epoch is not None:
        with_tl = [f for f in with_tl if f["epoch"] == epoch]
        if not with_tl:
            raise ValueError(f"plot_timeline: no timeline for epoch {epoch} in the figures")
    rows = (1 if with_tl else 0) + (1 if len(figs) > 1 or not with_tl else 0)
    fig_, axes = plt.subplots(rows, 1, figsize=(10, 2.2 + 2.6 * rows), squeeze=False)
    axes = list(axes[:, 0])
    colors = {"wait": "#d62728", "compute": "#2ca02c", "read": "#1f77b4",
              "collate": "#ff7f0e", "start": "#7f7f7f"}
    if with_tl:
        f = with_tl[-1]
        ax = axes.pop(0)
        tl = f["timeline"]
        waits = [(a, b - a) for a, b in tl["batches"]]
        comps = [(p[1], q[0] - p[1]) for p, q in zip(tl["batches"], tl["batches"][1:])]
        ax.broken_barh(comps, (0.6, 0.8), color=colors["compute"], label="compute")
        ax.broken_barh(waits, (0.6, 0.8), color=colors["wait"], label="waiting for data")
        workers = sorted({w for w, *_ in tl["fetches"]})
        split = any(x[3] > 0 for x in tl["fetches"])
        for i, w in enumerate(workers):
            fs = [x for x in tl["fetches"] if x[0] == w]
            y = 2 + i
            ax.broken_barh([(a, b - a - c) for _, a, b, c in fs], (y - 0.4, 0.8),
                           color=colors["read"], label=None if i else
                           "fetch: read" if split else "fetch (read + collate)")
            ax.broken_barh([(b - c, c) for _, a, b, c in fs if c > 0], (y - 0.4, 0.8),
                           color=colors["collate"], label="collate + pin" if i == 0 else None)
        ax.set_yticks([1] + [2 + i for i in range(len(workers))])
        ax.set_yticklabels(["consumer"] + [f"fetch {'main' if f['workers'] == 0 or w < 0 else f'w{w}'}"
                                           for w in workers])
        ax.set_xlabel("seconds since iter(loader)")
        kept = len(tl["batches"])
        ax.set_title(f"epoch {f['epoch']}: {f['batches']} batches"
                     + (f" (last {kept} shown)" if kept < f["batches"] else "")
                     + f", waiting {100 * f['wait_fraction']:.1f} % of {f['wall_s']:.3f} s")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), fontsize="small", ncol=4)
        ax.invert_yaxis()
    if axes:
        ax = axes.pop(0)
        xs = range(len(figs))
        bottom = [0.0] * len(figs)
        for k, name in (("start_s", "start"), ("wait_s", "wait"), ("compute_s", "compute")):
            v = [f[k] for f in figs]
            ax.bar(xs, v, bottom=bottom, color=colors[name], label=name)
            bottom = [a + b for a, b in zip(bottom, v)]
        ax.set_xticks(list(xs))
        ax.set_xticklabels([str(f["epoch"]) for f in figs])
        ax.set_xlabel("epoch")
        ax.set_ylabel("seconds")
        ax.set_title("each epoch's wall time: start, waiting for data, compute")
        ax.legend(fontsize="small")
    fig_.tight_layout()
    fig_.savefig(path, dpi=100)
    plt.close(fig_)
    return path
