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

import json
import logging
import sys

from ._ext import ext

__all__ = ["EpochStats", "Timed", "gather", "summary", "emit", "plot_timeline",
           "TIMELINE_BATCHES"]

TIMELINE_BATCHES = 2048     # batches (and fetches) kept per epoch for the timeline

log = logging.getLogger("pyddstore.torch.report")


def EpochStats(index, dataset, workers, depth, t0=None):
    """One epoch's figures (ext.EpochStats, ddstore-torch/csrc/report.cpp):
    enter(ready) / leave(t_enter, samples) by the consumer, add_fetch() by
    any thread, figures(timeline) the dict; the store's read counters from
    `dataset`'s get_profile() when it has a store."""
    get = getattr(dataset, "get_profile", None)
    if getattr(dataset, "ddstore", None) is None:
        get = None
    return ext.EpochStats(index, workers, depth, t0, get)


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
    mine = ext.report_mine(fig)
    if comm is None:
        alls, rank = [mine], 0
    elif comm == "torch":
        import torch.distributed as dist
        alls = [None] * dist.get_world_size()
        dist.all_gather_object(alls, mine)
        rank = dist.get_rank()
    elif hasattr(comm, "Get_rank"):
        alls, rank = comm.allgather(mine), comm.Get_rank()
    else:
        alls, rank = comm.allgather(mine), comm.rank
    return ext.report_spread(fig, alls, rank)


_gather = gather     # (for methods whose argument is named gather)


def summary(fig):
    """The one-screen text of gathered figures."""
    return ext.report_summary(fig)


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
