"""HydraGNN's ways of using DDStore, written from scratch as a user would.

HydraGNN (and other users of the original DDStore) must move over without
changing a line.  Its patterns:

(a) a "record array": every rank serialises its samples (pickle) into one flat
    1-D uint8 array of its own length and adds it as one variable; the users
    allgather per-sample byte counts, compute byte offsets, and read a sample
    with get(name, buf, byte_offset) into a uint8 buffer of its length - any
    length, anywhere, including across two ranks' shards;
(b) "feature-first" variables: per-sample variable-length node features of all
    local samples stacked into one 2-D variable (rows = nodes), with the
    per-sample node counts in another variable; a sample is read by its first
    row and its count;
(c) PyDDStore(comm.Split(rank // width, rank)) with no method argument: every
    group a store of its own, all alive at once;
(d) epoch_begin() / epoch_end() around every batch of a torch DataLoader
    (num_workers=0) over a Dataset whose __getitem__ calls store.get
    (method 0, the default).

Run at 1, 2 and 4 ranks:
    tools/ddrun -n 4 -- .venv/bin/python ci/pytest_rank.py -q python/tests/test_compat_hydragnn.py
"""
import pickle

import numpy as np
import pytest

import pyddstore

pytestmark = pytest.mark.skipif(not pyddstore.HAVE_MPI,
                                reason="HydraGNN's patterns use method 0 (MPI)")


def _comm():
    from mpi4py import MPI
    return MPI.COMM_WORLD


def _check_all(comm, ok, msg):
    """Collective check: every rank fails if any rank's check failed."""
    bad = [(r, m) for r, (o, m) in enumerate(comm.allgather((bool(ok), msg))) if not o]
    assert not bad, "; ".join(f"rank {r}: {m}" for r, m in bad)


# ---- sample data: graphs of varying size, the same on every rank ------------
NFEAT = 5


def _nodes(i):
    return 3 + (i * 7) % 11           # 3 .. 13 nodes


def _sample(i):
    n = _nodes(i)
    x = (np.arange(n * NFEAT, dtype=np.float32).reshape(n, NFEAT) + 1000 * i)
    edges = np.stack([np.arange(n - 1), np.arange(1, n)]).astype(np.int64) + i
    return {"id": i, "x": x, "edge_index": edges, "y": np.float64(i) / 3,
            "name": f"graph-{i}"}


def _same(a, b):
    return a.keys() == b.keys() and all(
        np.array_equal(a[k], b[k]) if isinstance(a[k], np.ndarray) else a[k] == b[k]
        for k in a)


def _split(n, rank, size):
    """HydraGNN-like uneven split: rank r loads samples [lo, hi)."""
    base, extra = divmod(n, size)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (rank < extra)


# ---- (a) the record array ---------------------------------------------------
class RecordArray:
    """What a HydraGNN-style user writes: pickled samples in one uint8 variable."""

    def __init__(self, store, comm, label, samples, first):
        blobs = [np.frombuffer(pickle.dumps(s), dtype=np.uint8) for s in samples]
        local = np.concatenate(blobs) if blobs else np.zeros(0, np.uint8)
        store.add(label, local)                         # 1-D uint8, its own length
        counts = comm.allgather([len(b) for b in blobs])
        self.count = np.array([c for cs in counts for c in cs], dtype=np.int64)
        self.offset = np.concatenate([[0], np.cumsum(self.count)[:-1]]).astype(np.int64)
        self.store, self.label, self.first = store, label, first

    def __len__(self):
        return len(self.count)

    def __getitem__(self, i):
        buf = np.zeros(int(self.count[i]), dtype=np.uint8)
        self.store.get(self.label, buf, int(self.offset[i]))
        return pickle.loads(buf.tobytes())


@pytest.mark.parametrize("width", [None, 2])
def test_record_array_uint8_byte_offsets(width):
    comm = _comm()
    sub = comm if width is None else comm.Split(comm.rank // width, comm.rank)
    n = 23
    lo, hi = _split(n, sub.rank, sub.size)
    store = pyddstore.PyDDStore(sub)
    try:
        rec = RecordArray(store, sub, "trainset", [_sample(i) for i in range(lo, hi)], lo)
        total, disp, itemsize = store.info("trainset")
        bad = ""
        if (total, disp, itemsize) != (int(rec.count.sum()), 1, 1):
            bad = f"info {(total, disp, itemsize)}"
        for i in range(n):                              # every sample, from any rank
            got = rec[i]
            if not bad and not _same(got, _sample(i)):
                bad = f"sample {i} differs"
        # any byte range, any length, including ranges across shard boundaries
        whole = b"".join(pickle.dumps(_sample(i)) for i in range(n))
        bounds = np.cumsum(sub.allgather(int(rec.count[lo:hi].sum())))[:-1]
        rng = np.random.default_rng(7 + sub.rank)
        spans = [(0, total), (total - 1, 1), (0, 1)]
        spans += [(int(b) - k, 2 * k) for b in bounds for k in (1, 5, 300)
                  if int(b) - k >= 0 and int(b) + k <= total]
        spans += [(int(s), int(rng.integers(1, total - s + 1)))
                  for s in rng.integers(0, total, 20)]
        for start, length in spans:
            buf = np.zeros(length, dtype=np.uint8)
            store.get("trainset", buf, start)
            if not bad and buf.tobytes() != whole[start:start + length]:
                bad = f"bytes [{start}, +{length}) differ"
        _check_all(comm, not bad, bad)
    finally:
        store.free()
        if sub is not comm:
            sub.Free()


# ---- (b) feature-first variables ---------------------------------------------
def test_feature_first_variables_with_counts():
    """Node features of all local graphs stacked (rows = nodes) + per-sample
    node counts in another variable; a sample = get(x, buf, first_row)."""
    comm = _comm()
    n = 19
    lo, hi = _split(n, comm.rank, comm.size)
    store = pyddstore.PyDDStore(comm)
    try:
        local = [_sample(i) for i in range(lo, hi)]
        store.add("x", np.concatenate([s["x"] for s in local]).astype(np.float32))
        store.add("x/count", np.array([s["x"].shape[0] for s in local], dtype=np.int64))
        store.add("y", np.array([[s["y"]] for s in local], dtype=np.float64))
        # the user's index: counts read back from the store, offsets by prefix sum
        counts = np.zeros(n, dtype=np.int64)
        store.get("x/count", counts, 0)
        first = np.concatenate([[0], np.cumsum(counts)[:-1]])
        bad = "" if list(counts) == [_nodes(i) for i in range(n)] else f"counts {counts}"
        rows, disp, _ = store.info("x")
        if not bad and (rows, disp) != (int(counts.sum()), NFEAT):
            bad = f"info(x) {(rows, disp)}"
        for i in list(range(n)) + list(range(n - 1, -1, -3)):
            c = np.zeros(1, dtype=np.int64)
            store.get("x/count", c, i)                  # one count at a time, too
            x = np.zeros((int(c[0]), NFEAT), dtype=np.float32)
            store.get("x", x, int(first[i]))
            y = np.zeros((1, 1))
            store.get("y", y, i)
            if not bad and not (np.array_equal(x, _sample(i)["x"]) and
                                y[0, 0] == _sample(i)["y"]):
                bad = f"sample {i} differs"
        # several samples' nodes in one get (crossing owners), and a batch
        x = np.zeros((int(counts[1:n - 1].sum()), NFEAT), dtype=np.float32)
        store.get("x", x, int(first[1]))
        want = np.concatenate([_sample(i)["x"] for i in range(1, n - 1)])
        if not bad and not np.array_equal(x, want):
            bad = "nodes of samples 1..n-2 differ"
        idx = [int(first[i]) for i in (n - 1, 0, n // 2)]
        x = np.zeros((3, NFEAT), dtype=np.float32)
        store.get_batch("x", x, idx)
        if not bad and not np.array_equal(
                x, np.stack([_sample(i)["x"][0] for i in (n - 1, 0, n // 2)])):
            bad = "get_batch of first nodes differs"
        _check_all(comm, not bad, bad)
    finally:
        store.free()


# ---- (c) split communicators, no method argument ------------------------------
@pytest.mark.parametrize("width", [1, 2, 3])
def test_split_communicator_stores_all_alive(width):
    """PyDDStore(comm.Split(rank // width, rank)): every group at once, with
    several variables each (Open MPI 4.1 failed with MPI_ERR_WIN here), then
    each group reads its own replica of the whole data set."""
    comm = _comm()
    sub = comm.Split(comm.rank // width, comm.rank)
    n = 17
    lo, hi = _split(n, sub.rank, sub.size)
    stores, err = [], None
    try:
        for rep in range(2):                            # two stores alive per group
            s = pyddstore.PyDDStore(sub)
            stores.append(s)
            RecordArray(s, sub, "rec", [_sample(i) for i in range(lo, hi)], lo)
            s.add("x", np.concatenate([_sample(i)["x"] for i in range(lo, hi)]))
            s.add("id", np.arange(lo, hi, dtype=np.int64) * (rep + 1))
    except Exception as e:  # noqa: BLE001 - checked on every rank below
        err = e
    try:
        bad = f"{type(err).__name__}: {err}" if err is not None else ""
        for rep, s in enumerate(stores if err is None else []):
            if s.size != sub.size or s.rank != sub.rank:
                bad = f"store {rep}: rank/size {s.rank}/{s.size}"
            ids = np.zeros(n, dtype=np.int64)
            s.get("id", ids, 0)
            if not bad and not np.array_equal(ids, np.arange(n) * (rep + 1)):
                bad = f"store {rep}: ids {ids}"
            x = np.zeros((sum(_nodes(i) for i in range(n)), NFEAT), np.float32)
            s.get("x", x, 0)
            if not bad and not np.array_equal(
                    x, np.concatenate([_sample(i)["x"] for i in range(n)])):
                bad = f"store {rep}: x differs"
        _check_all(comm, not bad, bad)
    finally:
        for s in stores:
            s.free()
        sub.Free()


# ---- (d) epoch_begin/epoch_end around every batch of a DataLoader -------------
def test_epochs_around_every_batch_of_a_dataloader():
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, Dataset
    from torch.utils.data.distributed import DistributedSampler

    comm = _comm()
    n = 29
    lo, hi = _split(n, comm.rank, comm.size)
    store = pyddstore.PyDDStore(comm)                   # method 0, the default
    assert store.method == 0

    class Graphs(Dataset):
        """HydraGNN's DistDataset shape: __getitem__ reads from the store."""

        def __init__(self):
            self.rec = RecordArray(store, comm, "graphs", [_sample(i) for i in range(lo, hi)],
                                   lo)

        def __len__(self):
            return len(self.rec)

        def __getitem__(self, i):
            s = self.rec[i]
            return torch.from_numpy(s["x"][0].copy()), s["id"]

    try:
        ds = Graphs()
        sampler = DistributedSampler(ds, num_replicas=comm.size, rank=comm.rank,
                                     shuffle=True, seed=3)
        loader = DataLoader(ds, batch_size=4, sampler=sampler, num_workers=0)
        bad, seen = "", []
        for epoch in range(2):
            sampler.set_epoch(epoch)
            it = iter(loader)
            while True:
                store.epoch_begin()                     # collective: every rank, every batch
                try:
                    x, ids = next(it)
                except StopIteration:
                    store.epoch_end()
                    break
                store.epoch_end()
                want = torch.stack([torch.from_numpy(_sample(int(i))["x"][0]) for i in ids])
                if not bad and not torch.equal(x, want):
                    bad = f"epoch {epoch}: batch {ids.tolist()} differs"
                seen += ids.tolist()
        everyone = sorted(i for part in comm.allgather(seen) for i in part)
        per_epoch = len(sampler) * comm.size
        if not bad and len(everyone) != 2 * per_epoch:
            bad = f"{len(everyone)} samples in 2 epochs, expected {2 * per_epoch}"
        if not bad and set(everyone) != set(range(n)):
            bad = "not every sample was read"
        _check_all(comm, not bad, bad)
    finally:
        store.free()
