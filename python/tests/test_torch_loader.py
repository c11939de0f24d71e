"""ThreadDataLoader (and DataLoader) over DistDataset: epochs equal a plain
DataLoader over the source, RNG parity, iterator semantics, prefetch depth,
reuse_buffers, close(), affinity, forked workers.

Run: tools/ddrun -n 4 -- .venv/bin/python -m pytest -q python/tests/test_torch_loader.py
"""
import os
import re
import threading
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _torch_util import (N_ODD, Source, assert_all, env_set, fresh_name,  # noqa: E402
                         require_method, same, shared_tmpdir, world)
import pyddstore  # noqa: E402
from pyddstore.torch import DistDataset, ThreadDataLoader  # noqa: E402
from pyddstore.torch._ext import ext  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402


@pytest.fixture(scope="module")
def datasets():
    comm = world()
    out = {}
    for kind in ("tuple", "dict", "namedtuple", "tensor", "list", "int", "half"):
        out[kind] = DistDataset(Source(kind), fresh_name("L" + kind), comm)
    yield comm, out
    for ds in out.values():
        ds.free()


def _epoch(loader):
    return list(loader)


def _cmp_epochs(comm, a, b, what):
    w = "" if len(a) == len(b) else f"{what}: {len(a)} vs {len(b)} batches"
    for k, (x, y) in enumerate(zip(a, b)):
        if w:
            break
        w = same(x, y, f"{what} batch {k}")
    assert_all(comm, not w, w)


@pytest.mark.parametrize("kind", ["tuple", "dict", "namedtuple", "tensor", "list", "int",
                                  "half"])
@pytest.mark.parametrize("workers", [0, 1, 3])
@pytest.mark.parametrize("fast", [1, 0])
def test_epochs_equal_plain_dataloader(datasets, kind, workers, fast, monkeypatch):
    comm, dss = datasets
    env_set(monkeypatch, DDSTORE_FAST_COLLATE=fast)
    ds = dss[kind]
    src = Source(kind)
    for drop_last in (False, True):
        ref = _epoch(DataLoader(src, batch_size=5, shuffle=True, drop_last=drop_last,
                                generator=torch.Generator().manual_seed(11)))
        got = _epoch(ThreadDataLoader(ds, batch_size=5, shuffle=True, drop_last=drop_last,
                                      num_workers=workers,
                                      generator=torch.Generator().manual_seed(11)))
        _cmp_epochs(comm, ref, got, f"ThreadDataLoader(w={workers})")
    if workers == 0 and fast:
        got = _epoch(DataLoader(ds, batch_size=5, shuffle=True,
                                generator=torch.Generator().manual_seed(11)))
        ref = _epoch(DataLoader(src, batch_size=5, shuffle=True,
                                generator=torch.Generator().manual_seed(11)))
        _cmp_epochs(comm, ref, got, "DataLoader over DistDataset")


@pytest.mark.parametrize("workers", [0, 2])
def test_no_auto_collation(datasets, workers):
    """batch_size=None: one sample at a time through default_convert."""
    comm, dss = datasets
    ref = _epoch(DataLoader(Source("dict"), batch_size=None, shuffle=True,
                            generator=torch.Generator().manual_seed(3)))
    got = _epoch(ThreadDataLoader(dss["dict"], batch_size=None, shuffle=True,
                                  num_workers=workers, generator=torch.Generator().manual_seed(3)))
    _cmp_epochs(comm, ref, got, "batch_size=None")


class _Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(range(11))


@pytest.mark.parametrize("workers", [0, 1])
def test_iterable_dataset(workers):
    comm = world()
    ref = [b.tolist() for b in DataLoader(_Stream(), batch_size=3)]
    got = [b.tolist() for b in ThreadDataLoader(_Stream(), batch_size=3, num_workers=workers)]
    with pytest.raises(ValueError):
        ThreadDataLoader(_Stream(), batch_size=3, num_workers=2)
    assert_all(comm, ref == got, f"{got} vs {ref}")


def test_subset_of_dist_dataset(datasets):
    comm, dss = datasets
    idx = [30, 2, 2, 17, 5, 36]
    sub = torch.utils.data.Subset(dss["tuple"], idx)
    ref = _epoch(DataLoader(torch.utils.data.Subset(Source("tuple"), idx), batch_size=4))
    loader = ThreadDataLoader(sub, batch_size=4, num_workers=2)
    got = _epoch(loader)
    loader.close()
    _cmp_epochs(comm, ref, got, "Subset")


def test_not_picklable(datasets):
    import pickle
    comm, dss = datasets
    with pytest.raises(TypeError, match="fork"):
        pickle.dumps(dss["tuple"])


def test_fast_path_is_used(datasets, monkeypatch):
    """With the default collate the batch is read straight into the batch
    tensors (one get_batch per field, no __getitems__)."""
    comm, dss = datasets
    ds = dss["tuple"]
    calls = {"getitems": 0, "collate": 0, "pipeline": 0}
    orig_gi, orig_c, orig_p = ds.__getitems__, ds._collate, ds._pipeline

    def gi(*a, **k):
        calls["getitems"] += 1
        return orig_gi(*a, **k)

    def col(*a, **k):
        calls["collate"] += 1
        return orig_c(*a, **k)

    def pipe(*a, **k):
        calls["pipeline"] += 1
        return orig_p(*a, **k)
    monkeypatch.setattr(ds, "__getitems__", gi)
    monkeypatch.setattr(ds, "_collate", col)
    monkeypatch.setattr(ds, "_pipeline", pipe)
    # worker threads: host batches through the native pipeline (one per epoch)
    n = len(list(ThreadDataLoader(ds, batch_size=8, num_workers=2)))
    ok = calls == {"getitems": 0, "collate": 0, "pipeline": 1}
    calls.update(pipeline=0)
    # in the calling thread, or with pinned memory: the direct collate
    n0 = len(list(ThreadDataLoader(ds, batch_size=8, num_workers=0)))
    ok = ok and n0 == n and calls == {"getitems": 0, "collate": n, "pipeline": 0}
    monkeypatch.setattr(ds, "_collate", orig_c)
    monkeypatch.setattr(ds, "_pipeline", orig_p)
    calls.update(getitems=0, collate=0)
    env_set(monkeypatch, DDSTORE_FAST_COLLATE=0)
    list(ThreadDataLoader(ds, batch_size=8, num_workers=2))
    ok = ok and calls["getitems"] == n
    env_set(monkeypatch, DDSTORE_FAST_COLLATE=None)
    calls.update(getitems=0)
    list(ThreadDataLoader(ds, batch_size=8, num_workers=1, collate_fn=lambda b: b))
    ok = ok and calls["getitems"] == n            # custom collate: per-sample path
    assert_all(comm, ok, f"calls {calls}")


def test_settings_read_when_made(datasets, monkeypatch, tmp_path):
    """DDSTORE_FAST_COLLATE, DDSTORE_LOADER_HELP and DDSTORE_LOADER_REPORT are
    read once, when the ThreadDataLoader is made: a change afterwards does
    not apply to it (every epoch follows the values it was made with), a
    loader made after the change follows the new values."""
    comm, dss = datasets
    ds = dss["tuple"]
    calls = {"getitems": 0}
    orig_gi = ds.__getitems__

    def gi(*a, **k):
        calls["getitems"] += 1
        return orig_gi(*a, **k)
    monkeypatch.setattr(ds, "__getitems__", gi)
    env_set(monkeypatch, DDSTORE_FAST_COLLATE=1, DDSTORE_LOADER_HELP=0,
            DDSTORE_LOADER_REPORT=None)
    made = [ThreadDataLoader(ds, batch_size=8, num_workers=w) for w in (0, 1)]
    report = tmp_path / "report.jsonl"
    env_set(monkeypatch, DDSTORE_FAST_COLLATE=0, DDSTORE_LOADER_HELP=1,
            DDSTORE_LOADER_REPORT=report)
    bad = []
    for lo in made:
        for _ in range(2):
            list(lo)
            if calls["getitems"]:
                bad.append(f"w={lo.num_workers}: per-sample reads after the change")
        who = {w for w, *_ in lo._stats.fetch_times}
        if lo.num_workers and -1 in who:
            bad.append(f"w=1: the consumer read ({who}) with DDSTORE_LOADER_HELP=0 at make")
        lo.close()
    lo = ThreadDataLoader(ds, batch_size=8, num_workers=1, report=False)
    list(lo)
    lo.close()
    if not calls["getitems"]:
        bad.append("a loader made after DDSTORE_FAST_COLLATE=0 read batches directly")
    if report.exists():
        bad.append("DDSTORE_LOADER_REPORT set after the loader was made was followed")
    assert_all(comm, not bad, "; ".join(bad))


@pytest.mark.parametrize("value", ["2", "-1", "0.5", "10"])
def test_loader_report_bare_number_is_an_error(datasets, monkeypatch, tmp_path, value):
    """DDSTORE_LOADER_REPORT is 0, 1 or a path: a bare number other than
    those is a ValueError naming the variable when the loader is made (it
    used to write a file named "2"); report="2" likewise; ./2 is a path."""
    comm, dss = datasets
    ds = dss["tuple"]
    monkeypatch.chdir(tmp_path)
    env_set(monkeypatch, DDSTORE_LOADER_REPORT=value)
    with pytest.raises(ValueError, match=r"DDSTORE_LOADER_REPORT='%s'.*a bare number"
                       % re.escape(value)):
        ThreadDataLoader(ds, batch_size=8, num_workers=0)
    env_set(monkeypatch, DDSTORE_LOADER_REPORT=None)
    with pytest.raises(ValueError, match="report='%s'" % re.escape(value)):
        ThreadDataLoader(ds, batch_size=8, num_workers=0, report=value)
    assert os.listdir(tmp_path) == []
    env_set(monkeypatch, DDSTORE_LOADER_REPORT="./" + value)
    lo = ThreadDataLoader(ds, batch_size=8, num_workers=0)
    assert lo._report_to == "./" + value
    lo.close()


@pytest.mark.parametrize("workers", [0, 1])
def test_report_of_an_epoch_in_progress(datasets, workers):
    """epoch_report() in the middle of an epoch (a loop that breaks early):
    the figures so far, not complete, with the store's reads so far."""
    comm, dss = datasets
    ds = dss["tuple"]
    lo = ThreadDataLoader(ds, batch_size=4, num_workers=workers)
    for k, _ in enumerate(lo):
        if k == 2:
            break
    fig = lo.epoch_report(timeline=True)
    lo.close()
    ok = (not fig["complete"] and fig["batches"] == 3 and fig["samples"] == 12 and
          fig["read"]["rows"] >= 12 and len(fig["timeline"]["batches"]) == 3)
    assert_all(comm, ok, f"figures of an epoch in progress: {fig}")


def test_distributed_sampler_epochs(datasets):
    """DistributedSampler with set_epoch: the same per-rank batches as over the source."""
    comm, dss = datasets
    ds, src = dss["tuple"], Source("tuple")
    r, n = comm.Get_rank(), comm.Get_size()
    s1 = torch.utils.data.distributed.DistributedSampler(ds, n, r, shuffle=True, seed=3)
    s2 = torch.utils.data.distributed.DistributedSampler(src, n, r, shuffle=True, seed=3)
    l1 = ThreadDataLoader(ds, batch_size=4, sampler=s1, num_workers=2)
    l2 = DataLoader(src, batch_size=4, sampler=s2)
    for epoch in range(3):
        s1.set_epoch(epoch)
        s2.set_epoch(epoch)
        _cmp_epochs(comm, _epoch(l2), _epoch(l1), f"epoch {epoch}")
    l1.close()


@pytest.mark.parametrize("workers", [0, 2])
def test_rng_parity_global_generator(datasets, workers):
    """Same draws from the global RNG as DataLoader: same order, same state after."""
    comm, dss = datasets
    ds = dss["int"]
    torch.manual_seed(123)
    ref = [b.tolist() for b in DataLoader(Source("int"), batch_size=4, shuffle=True)]
    ref_state = torch.get_rng_state()
    torch.manual_seed(123)
    got = [b.tolist() for b in ThreadDataLoader(ds, batch_size=4, shuffle=True,
                                                 num_workers=workers)]
    ok = ref == got and torch.equal(ref_state, torch.get_rng_state())
    # a second epoch continues identically
    ref2 = [b.tolist() for b in DataLoader(Source("int"), batch_size=4, shuffle=True)]
    torch.set_rng_state(ref_state)
    got2 = [b.tolist() for b in ThreadDataLoader(ds, batch_size=4, shuffle=True,
                                                  num_workers=workers)]
    assert_all(comm, ok and ref2 == got2, "RNG draws differ from DataLoader's")


def test_rng_parity_with_generator_and_sampler(datasets):
    comm, dss = datasets
    ds = dss["int"]
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    rs1 = torch.utils.data.RandomSampler(Source("int"), replacement=True, num_samples=20,
                                         generator=g1)
    rs2 = torch.utils.data.RandomSampler(ds, replacement=True, num_samples=20, generator=g2)
    a = [b.tolist() for b in DataLoader(Source("int"), batch_size=3, sampler=rs1,
                                        generator=g1)]
    b = [b.tolist() for b in ThreadDataLoader(ds, batch_size=3, sampler=rs2, generator=g2,
                                              num_workers=2)]
    ok = a == b and torch.equal(g1.get_state(), g2.get_state())
    assert_all(comm, ok, "generator draws differ")


def test_rng_parity_persistent_workers(datasets):
    """persistent_workers=True: DataLoader draws its base seed once per loader."""
    comm, dss = datasets
    ds = dss["int"]
    src = Source("int")
    torch.manual_seed(9)
    dl = DataLoader(src, batch_size=4, shuffle=True, num_workers=1, persistent_workers=True)
    ref = [[b.tolist() for b in dl] for _ in range(3)]
    st = torch.get_rng_state()
    del dl
    torch.manual_seed(9)
    tl = ThreadDataLoader(ds, batch_size=4, shuffle=True, num_workers=1,
                          persistent_workers=True)
    got = [[b.tolist() for b in tl] for _ in range(3)]
    ok = ref == got and torch.equal(st, torch.get_rng_state())
    tl.close()
    assert_all(comm, ok, "persistent_workers draws differ")


def test_iterator_semantics(datasets):
    comm, dss = datasets
    ds = dss["tuple"]
    loader = ThreadDataLoader(ds, batch_size=4, num_workers=2)
    ref = _epoch(DataLoader(Source("tuple"), batch_size=4))
    ok = len(loader) == len(ref) == (N_ODD + 3) // 4
    # two independent iterators, interleaved
    it1, it2 = iter(loader), iter(loader)
    assert it1 is not it2 and len(it1) == len(ref)
    a, b = [], []
    for k in range(len(ref)):
        a.append(next(it1))
        if k % 2 == 0:
            b.append(next(it2))
    b.extend(it2)
    with pytest.raises(StopIteration):
        next(it1)
    with pytest.raises(StopIteration):
        next(it1)                          # stays exhausted
    _cmp_epochs(comm, ref, a, "iterator 1")
    _cmp_epochs(comm, ref, b, "iterator 2")
    # early stop: break, then a fresh epoch is complete; the old threads end
    for k, _ in enumerate(loader):
        if k == 1:
            break
    _cmp_epochs(comm, ref, _epoch(loader), "after early stop")
    del it1, it2
    t0 = time.monotonic()
    while (any(t.name.startswith("ddstore-loader") for t in threading.enumerate()) or
           ext.native_threads()) and time.monotonic() - t0 < 10:
        time.sleep(0.05)
    # dropped iterators stop their threads (Python's and the native ones) without close()
    alive = [t.name for t in threading.enumerate() if t.name.startswith("ddstore-loader")]
    alive += ["native"] * ext.native_threads()
    loader.close()
    assert_all(comm, ok and not alive, f"len ok {ok}, threads left {alive}")
    with pytest.raises(RuntimeError):
        iter(loader)


def test_direct_collate_workers_are_native_threads(datasets, monkeypatch):
    """Default collate over a DistDataset: the worker threads are C++ threads
    (no Python thread per worker; they never take the GIL per batch), each
    calling worker_init_fn once; joined at the epoch's end.  An exception in
    worker_init_fn is raised by next() with its type and traceback."""
    import traceback
    comm, dss = datasets
    ds = dss["tuple"]
    before = ext.native_threads()
    inits = []
    loader = ThreadDataLoader(ds, batch_size=4, num_workers=2,
                              worker_init_fn=lambda w: inits.append(w))
    it = iter(loader)
    first = next(it)
    py_workers = [t.name for t in threading.enumerate() if t.name.startswith("ddstore-loader")]
    during = ext.native_threads() - before
    got = [first] + list(it)
    after = ext.native_threads() - before
    loader.close()
    bad = same(got, _epoch(DataLoader(Source("tuple"), batch_size=4)), "native epoch")
    if not bad and (py_workers or during != 2 or after != 0 or sorted(inits) != [0, 1]):
        bad = (f"python workers {py_workers}, native threads {during} during / {after} "
               f"after, worker_init_fn calls {inits}")

    def failing_init(w):
        raise KeyError(f"init of worker {w}")
    env_set(monkeypatch, DDSTORE_LOADER_HELP=0)   # (else the consumer may read them all)
    loader = ThreadDataLoader(ds, batch_size=4, num_workers=1, worker_init_fn=failing_init)
    err = None
    try:
        list(loader)
    except KeyError as e:
        err = e
    loader.close()
    frames = [f.name for f in traceback.extract_tb(err.__traceback__)] if err else []
    if not bad and (err is None or "init of worker 0" not in str(err) or
                    "failing_init" not in frames):
        bad = f"worker_init_fn error: {err!r}, traceback frames {frames}"
    assert_all(comm, not bad, bad)


@pytest.mark.parametrize("kind", ["native", "python"])
def test_next_after_loader_close_raises(datasets, kind):
    """loader.close() stops the threads of an epoch still being iterated: its
    next() raises RuntimeError (it used to spin for ever with the native
    pipeline), with the C++ and with the Python worker threads."""
    comm, dss = datasets
    ds = dss["tuple"]
    collate = None if kind == "native" else (lambda rows: torch.utils.data.default_collate(rows))
    loader = ThreadDataLoader(ds, batch_size=2, num_workers=1, collate_fn=collate)
    it = iter(loader)
    next(it)
    loader.close()
    err = None
    try:
        for _ in it:
            pass
    except RuntimeError as e:
        err = e
    assert_all(comm, err is not None, f"{kind}: the epoch went on after loader.close()")


def test_in_order_false(datasets):
    comm, dss = datasets
    got = [b.tolist() for b in ThreadDataLoader(dss["int"], batch_size=4, num_workers=3,
                                                 in_order=False)]
    ref = [b.tolist() for b in DataLoader(Source("int"), batch_size=4)]
    assert_all(comm, sorted(got) == sorted(ref), "in_order=False lost or repeated batches")


class _Counting(torch.utils.data.Dataset):
    """Records when each batch was fetched (per-sample path)."""

    def __init__(self, n):
        self.n = n
        self.fetched = []
        self.lock = threading.Lock()

    def __len__(self):
        return self.n

    def __getitems__(self, idx):
        with self.lock:
            self.fetched.append(idx[0])
        return [torch.tensor(i) for i in idx]


@pytest.mark.parametrize("workers,pf", [(1, 1), (2, 2), (3, 4)])
def test_exact_prefetch_depth(workers, pf):
    comm = world()
    ds = _Counting(200)
    loader = ThreadDataLoader(ds, batch_size=2, num_workers=workers, prefetch_factor=pf)
    it = iter(loader)
    depth = workers * pf
    seen = []
    for k in range(1, 6):
        next(it)
        t0 = time.monotonic()
        while len(ds.fetched) < k + depth and time.monotonic() - t0 < 5:
            time.sleep(0.005)
        time.sleep(0.05)                      # nothing more may arrive
        seen.append(len(ds.fetched) - k)
    loader.close()
    assert_all(comm, seen == [depth] * 5, f"in flight {seen}, expected {depth}")


def test_prefetch_depth_direct_collate(datasets, monkeypatch):
    comm, dss = datasets
    ds = dss["tuple"]
    n = [0]
    orig = ds._collate

    def col(*a, **k):
        n[0] += 1
        return orig(*a, **k)
    monkeypatch.setattr(ds, "_collate", col)
    monkeypatch.setattr(ds, "_pipeline", lambda: None)     # the Python workers' path
    it = iter(ThreadDataLoader(ds, batch_size=2, num_workers=2, prefetch_factor=3))
    next(it)
    t0 = time.monotonic()
    while n[0] < 7 and time.monotonic() - t0 < 5:
        time.sleep(0.005)
    time.sleep(0.05)
    got = n[0]
    del it
    assert_all(comm, got == 1 + 2 * 3, f"{got} batches fetched after the first next()")


def test_prefetch_depth_native_pipeline(datasets):
    """The native pipeline keeps num_workers * prefetch_factor batches read
    ahead, as the Python workers do."""
    comm, dss = datasets
    ds = dss["tuple"]
    it = iter(ThreadDataLoader(ds, batch_size=2, num_workers=2, prefetch_factor=3))
    pipe = it._b.pipe
    next(it)
    t0 = time.monotonic()
    while pipe.ready() < 6 and time.monotonic() - t0 < 5:
        time.sleep(0.005)
    time.sleep(0.05)
    got = pipe.ready()
    rest = list(it)
    ok = got == 2 * 3 and len(rest) == (len(ds) + 1) // 2 - 1
    del it
    assert_all(comm, ok, f"{got} batches read ahead after the first next(), {len(rest)} after")


@pytest.mark.parametrize("help_", [1, 0])
def test_consumer_reads_batches_no_worker_started(datasets, help_, monkeypatch):
    """DDSTORE_LOADER_HELP=1 (the default): a training loop that asks for a
    batch no worker has started reads it itself (worker -1 in the loader's
    figures), in order, the same batches; with 0 only the workers read.  The
    worker here starts reading only after the epoch (its worker_init_fn
    waits), so with help every batch is the consumer's."""
    comm, dss = datasets
    env_set(monkeypatch, DDSTORE_LOADER_HELP=help_)
    ds = dss["tuple"]
    go = threading.Event()
    init = (lambda w: go.wait(60)) if help_ else None
    for kind in ("tuple", "dict"):
        ds = dss[kind]
        ref = _epoch(DataLoader(Source(kind), batch_size=4, shuffle=True,
                                generator=torch.Generator().manual_seed(5)))
        loader = ThreadDataLoader(ds, batch_size=4, num_workers=1, shuffle=True,
                                  worker_init_fn=init,
                                  generator=torch.Generator().manual_seed(5))
        got = []
        for b in loader:
            got.append(b)
            if len(got) == len(loader):
                go.set()                          # the worker starts now
        who = {w for w, *_ in loader._stats.fetch_times}
        loader.close()
        go.clear()
        _cmp_epochs(comm, ref, got, f"{kind}, DDSTORE_LOADER_HELP={help_}")
        want = {-1} if help_ else {0}
        assert_all(comm, who == want, f"{kind}: batches read by {who}, expected {want}")


def test_consumer_read_error_is_raised(datasets):
    """A batch the consumer reads itself fails as a worker's would: the
    error (naming the index) is raised by next() for that batch, and the
    dataset is usable after."""
    comm, dss = datasets
    ds = dss["tuple"]
    go = threading.Event()

    class Bad(torch.utils.data.Sampler):
        def __len__(self):
            return 3

        def __iter__(self):
            yield [0, 1]
            yield [0, len(ds) + 7]              # outside the dataset
            yield [2, 3]
    loader = ThreadDataLoader(ds, batch_sampler=Bad(), num_workers=1,
                              worker_init_fn=lambda w: go.wait(60))
    it = iter(loader)
    try:
        first = next(it)
        with pytest.raises(IndexError, match=str(len(ds) + 7)):
            next(it)
    finally:
        go.set()
    who = {w for w, *_ in loader._stats.fetch_times}
    del it
    loader.close()
    src = Source("tuple")
    w = same(first, torch.utils.data.default_collate([src[0], src[1]]), "first batch")
    # the store and the dataset are usable after the error
    again = list(ThreadDataLoader(ds, batch_size=2, num_workers=1))
    w = w or same(again[1], torch.utils.data.default_collate([src[2], src[3]]), "next epoch")
    assert_all(comm, not w and who == {-1}, w or f"batches read by {who}")


def test_worker_exception_is_raised(datasets):
    comm, dss = datasets

    class Bad(torch.utils.data.Dataset):
        def __len__(self):
            return 10

        def __getitem__(self, i):
            if i == 5:
                raise KeyError("bad sample 5")
            return i
    loader = ThreadDataLoader(Bad(), batch_size=2, num_workers=2)
    with pytest.raises(KeyError, match="bad sample 5"):
        list(loader)
    loader.close()


# ------------------------------------------------------------ reuse_buffers --
def test_reuse_buffers_misuse(datasets):
    comm, dss = datasets
    ds = dss["tuple"]
    with pytest.raises(ValueError, match="batch_size"):
        ThreadDataLoader(ds, batch_size=None, reuse_buffers=True)
    with pytest.raises(ValueError, match="collate"):
        ThreadDataLoader(ds, batch_size=4, reuse_buffers=True, collate_fn=lambda b: b)
    # a dataset without alloc(): TypeError naming its type (also a ValueError,
    # as it was), at construction
    for plain in (Source("tuple"), torch.utils.data.TensorDataset(torch.zeros(8, 2))):
        with pytest.raises(TypeError, match=f"alloc.*{type(plain).__name__}") as e:
            ThreadDataLoader(plain, batch_size=4, reuse_buffers=True)
        assert isinstance(e.value, ValueError)
    with pytest.raises(ValueError, match="batch_size"):
        ThreadDataLoader(ds, batch_sampler=[[0, 1], [2, 3]], reuse_buffers=True)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("fast", [1, 0])
def test_reuse_buffers(datasets, workers, fast, monkeypatch):
    comm, dss = datasets
    env_set(monkeypatch, DDSTORE_FAST_COLLATE=fast)
    ds = dss["dict"]
    loader = ThreadDataLoader(ds, batch_size=6, shuffle=True, num_workers=workers,
                              reuse_buffers=True, generator=torch.Generator().manual_seed(1))
    ref_loader = DataLoader(Source("dict"), batch_size=6, shuffle=True,
                            generator=torch.Generator().manual_seed(1))
    ref, ref2 = _epoch(ref_loader), _epoch(ref_loader)
    e1 = _epoch(loader)            # batches kept across the epoch: must be copies
    e2 = _epoch(loader)
    n_allocs = len(ds._allocs)
    loader.close()
    _cmp_epochs(comm, ref, e1, "epoch 1")
    _cmp_epochs(comm, ref2, e2, "epoch 2")
    assert_all(comm, n_allocs == max(1, workers) and len(ds._allocs) == 0,
               f"{n_allocs} buffer sets, {len(ds._allocs)} left after close()")


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("reuse", [False, True])
def test_iterator_close(datasets, workers, reuse):
    """it.close() ends the epoch like generator.close(): next() raises
    StopIteration, the worker threads stop, prefetched batches and the
    reuse_buffers sets are released; idempotent; a new epoch still works."""
    comm, dss = datasets
    ds = dss["dict"]
    allocs0 = len(ds._allocs)
    loader = ThreadDataLoader(ds, batch_size=4, num_workers=workers, reuse_buffers=reuse)
    it = iter(loader)
    first = next(it)
    deadline = time.monotonic() + 30          # every worker has taken its slot
    while len(it._b.slots) < workers and time.monotonic() < deadline:
        time.sleep(0.01)
    held = len(ds._allocs) - allocs0
    it.close()
    stopped = []
    for _ in range(2):
        try:
            next(it)
            stopped.append(False)
        except StopIteration:
            stopped.append(True)
    it.close()                                          # idempotent
    after_close = len(ds._allocs) - allocs0
    alive = it._b.alive()
    prefetched = it._b.pending()
    ref = list(DataLoader(Source("dict"), batch_size=4))
    again = list(loader)                                 # a new epoch after close()
    loader.close()
    bad = same(first, ref[0], "first batch") or same(again, ref, "epoch after close()")
    if not bad and not all(stopped):
        bad = f"next() after close(): {stopped}"
    if not bad and alive:
        bad = f"threads still running after close(): {alive}"
    if not bad and prefetched:
        bad = f"{prefetched} batches/tasks kept after close()"
    if not bad and (held != (max(1, workers) if reuse else 0) or after_close != 0):
        bad = f"buffer sets: {held} held, {after_close} left after close()"
    if not bad and len(ds._allocs) != allocs0:
        bad = f"{len(ds._allocs) - allocs0} buffer sets left after loader.close()"
    assert_all(comm, not bad, bad)


def test_reuse_buffers_collate_copies(datasets):
    comm, dss = datasets
    ds = dss["tuple"]

    def collate(batch):                    # copies: stack
        return torch.stack([b[0] for b in batch]), [b[1] for b in batch]
    loader = ThreadDataLoader(ds, batch_size=5, num_workers=1, reuse_buffers=True,
                              collate_copies=True, collate_fn=collate)
    got = _epoch(loader)
    ref = [collate(b) for b in DataLoader(Source("tuple"), batch_size=5,
                                          collate_fn=lambda b: b)]
    loader.close()
    _cmp_epochs(comm, [(a, b) for a, b in ref], [(a, b) for a, b in got], "collate_copies")


def test_profile_sums_thread_readers(datasets):
    comm, dss = datasets
    ds = dss["tensor"]
    before = ds.get_profile()["calls"]
    loader = ThreadDataLoader(ds, batch_size=4, num_workers=3)
    n = len(list(loader))
    after = loader.get_profile()["calls"]
    loader.close()
    assert_all(comm, after - before == n, f"{after - before} calls for {n} batches")


def test_affinity(datasets, monkeypatch):
    comm, dss = datasets
    ds = dss["tensor"]
    from pyddstore.torch import env
    env_set(monkeypatch, DDSTORE_AFFINITY_WIDTH=1, DDSTORE_AFFINITY_OFFSET=0)
    allowed = os.sched_getaffinity(0)
    seen = {}

    def init(wid):
        seen[wid] = os.sched_getaffinity(0)
    loader = ThreadDataLoader(ds, batch_size=4, num_workers=2, worker_init_fn=init)
    list(loader)
    loader.close()
    want = {env.local_rank()}            # width 1: one CPU per local rank
    ok = all(s == want for s in seen.values()) if want <= allowed else \
        all(s == allowed for s in seen.values())
    assert_all(comm, ok and len(seen) == 2, f"affinity {seen}, wanted {want}")
    assert os.sched_getaffinity(0) == allowed     # the main thread is not pinned


# ---------------------------------------------------------- sampler_kwargs --
def test_sampler_kwargs(datasets):
    """DistributedSampler(ds, **sampler_kwargs(ds)) without a process group:
    the job's ranks from the dataset's communicator (also through
    WindowedDataset / Subset, and with ddstore_width: every rank of the job);
    the ranks' samplers split the dataset."""
    from pyddstore.torch import WindowedDataset, sampler_kwargs
    from torch.utils.data.distributed import DistributedSampler
    comm, dss = datasets
    ds = dss["tuple"]
    want = {"num_replicas": comm.Get_size(), "rank": comm.Get_rank()}
    narrow = DistDataset(Source("tuple"), fresh_name("sk"), comm, ddstore_width=1)
    try:
        got = [sampler_kwargs(ds), sampler_kwargs(narrow),
               sampler_kwargs(WindowedDataset(ds, 2)),
               sampler_kwargs(torch.utils.data.Subset(ds, [3, 1, 4])),
               sampler_kwargs(torch.utils.data.ConcatDataset([ds, narrow]))]
    finally:
        narrow.free()
    bad = "" if all(g == want for g in got) else f"{got} != {want}"
    sampler = DistributedSampler(ds, **sampler_kwargs(ds), shuffle=True, seed=3)
    sampler.set_epoch(1)
    mine = list(sampler)
    every = comm.allgather(mine)
    covered = sorted(i for part in every for i in part)
    if not bad and set(covered) != set(range(N_ODD)):
        bad = f"the ranks' samplers cover {sorted(set(covered))}"
    if not bad and len({len(p) for p in every}) != 1:
        bad = f"uneven shares {[len(p) for p in every]}"
    assert_all(comm, not bad, bad)
    with pytest.raises(TypeError, match="DistDataset"):
        sampler_kwargs(Source("tuple"))


_SNIPPETS = [("README.md", "With PyTorch"), ("docs/pytorch.md", "# PyTorch integration"),
             ("docs/quickstart.md", "With PyTorch")]


@pytest.mark.parametrize("doc,after", _SNIPPETS, ids=[d for d, _ in _SNIPPETS])
def test_docs_pytorch_snippets_run_as_written(doc, after):
    """The first PyTorch snippet after `after` in README.md, docs/pytorch.md
    and docs/quickstart.md runs as written under mpirun (every rank)."""
    import re
    comm = world()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, doc)) as fh:
        text = fh.read()
    start = text.index(after)
    code = re.search(r"```python[^\n]*\n(.*?)```", text[start:], re.S).group(1)
    assert "sampler_kwargs" in code and "my_dataset =" in code, code
    ns = {"__name__": "__snippet__"}
    err = None
    try:
        exec(compile(code, f"{doc} snippet", "exec"), ns)
    except Exception as e:  # noqa: BLE001 - agreed below
        err = e
    for v in list(ns.values()):                  # free what the snippet left alive
        if isinstance(v, DistDataset):
            v.free()
    assert_all(comm, err is None, f"{doc}: {type(err).__name__}: {err}")


# ------------------------------------------------------------ forked workers --
@pytest.mark.parametrize("persistent", [False, True])
def test_forked_workers_method0_one_node(datasets, persistent):
    """DataLoader with forked workers over a method-0 DistDataset, every rank on
    this node: the workers read every shard through the shared memory they
    inherited (no MPI after fork, no DDSTORE_FORK_WORKERS needed); every
    batch equals a plain DataLoader's over the source, for every field kind."""
    comm, dss = datasets
    rs = torch.utils.data.RandomSampler    # own generators: the same order in every
    for kind in ("tuple", "dict", "tensor"):   # epoch, persistent workers or not
        loader = DataLoader(dss[kind], batch_size=4, num_workers=2,
                            sampler=rs(dss[kind], generator=torch.Generator().manual_seed(5)),
                            persistent_workers=persistent, multiprocessing_context="fork")
        ref_loader = DataLoader(Source(kind), batch_size=4,
                                sampler=rs(Source(kind), generator=torch.Generator().manual_seed(5)))
        for epoch in range(2):
            _cmp_epochs(comm, _epoch(ref_loader), _epoch(loader),
                        f"method 0 forked {kind} epoch {epoch}")
        del loader


@pytest.mark.parametrize("persistent", [False, True])
def test_forked_workers_profile_counts_their_reads(datasets, persistent):
    """get_profile() in the parent includes what forked DataLoader workers
    read (it read all-zero counters before): every row of every field, over
    two epochs, with workers that end or persist between epochs."""
    comm, dss = datasets
    ds = dss["dict"]
    nf = len(ds.fields)
    before = ds.get_profile()
    loader = DataLoader(ds, batch_size=4, num_workers=2, persistent_workers=persistent,
                        multiprocessing_context="fork")
    n = sum(len(next(iter(b.values()))) for _ in range(2) for b in loader)
    del loader
    after = ds.get_profile()
    bad = ""
    if after["rows"] - before["rows"] != n * nf:
        bad = f"rows counted {after['rows'] - before['rows']}, read {n} x {nf} fields"
    elif after["calls"] <= before["calls"]:
        bad = f"calls {before['calls']} -> {after['calls']}"
    assert_all(comm, not bad, bad)


class _Rows(torch.utils.data.Dataset):
    """The original's user pattern: __getitem__ reads one row with store.get."""

    def __init__(self, store, name, total, disp):
        self.store, self.name, self.total, self.disp = store, name, total, disp

    def __len__(self):
        return self.total

    def __getitem__(self, i):
        out = np.zeros((1, self.disp), np.float64)
        self.store.get(self.name, out, i)
        return torch.from_numpy(out[0]), i


def test_forked_workers_method0_see_updates():
    """Persistent forked workers read rows updated by every rank before
    epoch_begin() (the shards are MAP_SHARED: no snapshot at fork)."""
    comm = world()
    s = pyddstore.PyDDStore(comm)
    disp, mine = 3, 5 + comm.rank % 3
    counts = comm.allgather(mine)
    lo, total = sum(counts[:comm.rank]), sum(counts)
    base = np.arange(lo, lo + mine, dtype=np.float64).reshape(-1, 1)
    s.add("u", np.repeat(base, disp, axis=1))
    try:
        loader = DataLoader(_Rows(s, "u", total, disp), batch_size=3, shuffle=True,
                            num_workers=2, persistent_workers=True,
                            multiprocessing_context="fork",
                            generator=torch.Generator().manual_seed(1))
        bad = ""
        for epoch in range(3):
            # every rank rewrites its rows: value = 1000 * epoch + global row.
            # (The barriers keep this test about forked workers and shared memory,
            # whatever epoch_begin/epoch_end synchronise: docs/concurrency.md.)
            comm.Barrier()
            s.update("u", np.repeat(base + 1000 * epoch, disp, axis=1), 0)
            s.epoch_begin()
            comm.Barrier()
            seen = 0
            for x, idx in loader:
                want = (1000.0 * epoch + idx.double()).reshape(-1, 1).expand(-1, disp)
                if not bad and not torch.equal(x, want):
                    bad = f"epoch {epoch}: rows {idx.tolist()} read {x[:, 0].tolist()}"
                seen += len(idx)
            s.epoch_end()
            if not bad and seen != total:
                bad = f"epoch {epoch}: {seen} rows of {total}"
        del loader
        assert_all(comm, not bad, bad)
    finally:
        s.free()


def test_forked_workers_method0_other_node_clear_error(monkeypatch):
    """A shard that is not in shared memory here (another node; simulated with
    DDSTORE_MPI_SHM=0) cannot be read after fork: a clear error naming
    ThreadDataLoader and method 1, on every rank (nothing collective, no
    hang).  One rank: only its own shard, which its workers read."""
    comm = world()
    env_set(monkeypatch, DDSTORE_MPI_SHM=0)
    ds = DistDataset(Source("tuple"), fresh_name("f0x"), comm)
    try:
        loader = DataLoader(ds, batch_size=4, num_workers=1, multiprocessing_context="fork")
        err = None
        try:
            got = _epoch(loader)
        except RuntimeError as e:
            err = e
        if comm.Get_size() == 1:
            assert err is None, err
            _cmp_epochs(comm, _epoch(DataLoader(Source("tuple"), batch_size=4)), got,
                        "one rank, DDSTORE_MPI_SHM=0")
        else:
            msg = str(err)
            ok = isinstance(err, pyddstore.DDStoreError) and "ThreadDataLoader" in msg \
                and "method=1" in msg and "forked" in msg and "DDSTORE_MPI_SHM=0" in msg
            assert_all(comm, ok, f"{type(err).__name__}: {msg}")
        del loader
    finally:
        ds.free()


@pytest.mark.parametrize("persistent", [False, True])
def test_forked_workers_method1(persistent, monkeypatch):
    comm = world()
    require_method(1, comm)
    env_set(monkeypatch, DDSTORE_FORK_WORKERS=1)
    ds = DistDataset(Source("tuple"), fresh_name("fk"), comm, method=1,
                     handshake_dir=shared_tmpdir(comm, "hs"))
    try:
        loader = DataLoader(ds, batch_size=4, shuffle=True, num_workers=2,
                            persistent_workers=persistent, multiprocessing_context="fork",
                            generator=torch.Generator().manual_seed(2))
        ref = _epoch(DataLoader(Source("tuple"), batch_size=4, shuffle=True,
                                generator=torch.Generator().manual_seed(2)))
        for epoch in range(2):
            got = _epoch(loader)
            if epoch == 0:
                _cmp_epochs(comm, ref, got, f"forked epoch {epoch}")
        del loader
    finally:
        ds.free()


@pytest.mark.parametrize("persistent", [False, True])
def test_forked_workers_method2_reader(persistent, monkeypatch):
    """DataLoader forked workers over a DistDatasetReader (method 2; the
    core DistDataset is this same job, every rank also a reader)."""
    from pyddstore.torch import DistDatasetReader
    comm = world()
    require_method(2, comm)
    env_set(monkeypatch, DDSTORE_FORK_WORKERS=1)
    hs = shared_tmpdir(comm, "hs2")
    ds = DistDataset(Source("tuple"), fresh_name("fk2"), comm, method=2, handshake_dir=hs)
    try:
        rd = DistDatasetReader(ds.name, handshake_dir=hs)
        loader = DataLoader(rd, batch_size=4, shuffle=True, num_workers=2,
                            persistent_workers=persistent, multiprocessing_context="fork",
                            generator=torch.Generator().manual_seed(3))
        ref = _epoch(DataLoader(Source("tuple"), batch_size=4, shuffle=True,
                                generator=torch.Generator().manual_seed(3)))
        for epoch in range(2):
            got = _epoch(loader)
            if epoch == 0:
                _cmp_epochs(comm, ref, got, f"forked reader epoch {epoch}")
        del loader
        # and threads with per-thread readers, direct collate
        tl = ThreadDataLoader(rd, batch_size=4, shuffle=True, num_workers=2,
                              generator=torch.Generator().manual_seed(3))
        got = _epoch(tl)
        tl.close()
        _cmp_epochs(comm, ref, got, "thread loader over the reader")
        rd.free()
    finally:
        ds.free()


def test_thread_readers_method1(monkeypatch):
    comm = world()
    require_method(1, comm)
    ds = DistDataset(Source("tensor"), fresh_name("tr"), comm, method=1,
                     handshake_dir=shared_tmpdir(comm, "hs"))
    try:
        for readers in (1, 0):
            env_set(monkeypatch, DDSTORE_THREAD_READERS=readers)
            loader = ThreadDataLoader(ds, batch_size=4, num_workers=3)
            got = _epoch(loader)
            n_readers = sum(len(s.readers) for s in loader._all_slots)
            loader.close()
            _cmp_epochs(comm, _epoch(DataLoader(Source("tensor"), batch_size=4)), got, "readers")
            assert_all(comm, n_readers == (3 if readers else 0), f"{n_readers} readers")
    finally:
        ds.free()


_ = np
