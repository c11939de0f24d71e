"""DistSampler: the permutation (bijection at edge sizes, uniformity next to
torch.randperm), the split across ranks (DistributedSampler's exactly without
shuffling), and its state: same-world resume gives the same indices, another
world size covers the rest of the epoch exactly; bad states are refused.

Pure computations (no store) apart from the defaults test.  Under a launcher
the heavier pure checks are shared out: each runs on one rank (`owner`), the
others have nothing to check for it.  Run: tools/ddrun -n 2 -- .venv/bin/python -m pytest -q python/tests/test_sampler.py
"""
import collections
import json
import math
import os
import pickle
import zlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _torch_util import Source, assert_all, fresh_name, world  # noqa: E402
from pyddstore.torch import DistDataset, DistSampler  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402
from torch.utils.data.distributed import DistributedSampler  # noqa: E402

EDGES = [1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 255, 256, 257,
         1023, 1024, 1025, 4095, 4096, 4097, 65535, 65536, 65537]


def _rank_size():
    for r, n in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"),
                 ("PMIX_RANK", "PMIX_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS")):
        if r in os.environ and n in os.environ:
            return int(os.environ[r]), int(os.environ[n])
    return 0, 1


@pytest.fixture
def owner(request):
    """True on the one rank that runs this (pure) check."""
    rank, size = _rank_size()
    return zlib.crc32(request.node.nodeid.encode()) % size == rank


def ranks(n, w, **kw):
    """Every rank's index list of one epoch."""
    return [list(DistSampler(n, w, r, **kw)) for r in range(w)]


def chi2_crit(dof, z=3.719):
    """Wilson-Hilferty: the chi-square quantile (z = 3.719: p = 1e-4)."""
    a = 2.0 / (9.0 * dof)
    return dof * (1.0 - a + z * math.sqrt(a)) ** 3


# ------------------------------------------------------------ permutation ---
@pytest.mark.parametrize("n", EDGES)
def test_bijection_at_edges(n, owner):
    if not owner:
        return
    s = DistSampler(n, 1, 0, seed=12345)
    s.set_epoch(3)
    pos = np.arange(n)
    out = s.order(pos)
    assert np.array_equal(np.sort(out), pos)
    assert np.array_equal(s.position_of(out), pos)
    assert sorted(s) == list(range(n))
    if n >= 8:   # an actual shuffle, not the identity
        assert not np.array_equal(out, pos)


def test_bijection_2_32_plus_1_sampled(owner):
    if not owner:
        return
    n = 2 ** 32 + 1
    s = DistSampler(n, 1, 0, seed=7)
    rng = np.random.default_rng(0)
    pos = np.unique(np.concatenate([rng.integers(0, n, 1 << 16),
                                    [0, 1, 2 ** 31, 2 ** 32 - 1, 2 ** 32]]))
    out = s.order(pos)
    assert out.min() >= 0 and out.max() < n
    assert np.unique(out).size == pos.size            # injective on the sample
    assert np.array_equal(s.position_of(out), pos)    # and the inverse undoes it
    idx = rng.integers(0, n, 1 << 16)
    assert np.array_equal(s.order(s.position_of(idx)), idx)
    with pytest.raises(IndexError):
        s.order([n])


def _chi2(perms, n):
    """Chi-square of the (index, position) counts against the uniform."""
    counts = np.zeros((n, n))
    for p in perms:
        counts[np.asarray(p), np.arange(n)] += 1
    e = len(perms) / n
    return ((counts - e) ** 2 / e).sum()


@pytest.mark.parametrize("n", [3, 13])
def test_uniform_position_of_index(n, owner):
    """Where each index lands, over 2000 epochs and over 2000 seeds: chi-square
    against the uniform at p = 1e-4, next to torch.randperm's."""
    if not owner:
        return
    trials = 2000
    dof = (n - 1) ** 2
    s = DistSampler(n, 1, 0, seed=2024)
    by_epoch = []
    for e in range(trials):
        s.set_epoch(e)
        by_epoch.append(s.order(np.arange(n)))
    by_seed = [DistSampler(n, 1, 0, seed=k).order(np.arange(n)) for k in range(trials)]
    g = torch.Generator().manual_seed(1)
    ref = [torch.randperm(n, generator=g).numpy() for _ in range(trials)]
    crit = chi2_crit(dof)
    stats = {"epochs": _chi2(by_epoch, n), "seeds": _chi2(by_seed, n),
             "randperm": _chi2(ref, n)}
    assert all(v < crit for v in stats.values()), (stats, crit)
    # and not suspiciously regular (a rotation would give 0)
    assert min(stats.values()) > chi2_crit(dof, z=-3.719), stats


def test_epochs_and_seeds_give_other_orders():
    a = DistSampler(1000, 1, 0, seed=1)
    first = list(a)
    assert list(DistSampler(1000, 1, 0, seed=1)) == first          # deterministic
    assert list(DistSampler(1000, 1, 0, seed=2)) != first
    a.set_epoch(1)
    assert list(a) != first
    a.set_epoch(0)
    assert list(a) == first


# ------------------------------------------------------------------ split ---
@pytest.mark.parametrize("n", [0, 1, 5, 10, 37])
@pytest.mark.parametrize("drop_last", [False, True])
def test_unshuffled_equals_distributed_sampler(n, drop_last, owner):
    if not owner:
        return
    for w in (1, 2, 3, 4, 7, 40):
        for r in range(w):
            ref = DistributedSampler(range(n), w, r, shuffle=False, drop_last=drop_last)
            got = DistSampler(n, w, r, shuffle=False, drop_last=drop_last)
            assert len(got) == len(ref), (n, w, r)
            assert list(got) == list(ref), (n, w, r)


@pytest.mark.parametrize("n", [1, 5, 37, 1000])
@pytest.mark.parametrize("drop_last", [False, True])
def test_shuffled_split(n, drop_last, owner):
    """Equal counts; rank r has positions r::W of one global order; pad with
    the first positions / drop the last ones as DistributedSampler does."""
    if not owner:
        return
    for w in (1, 2, 3, 4, 8, 41):
        lists = ranks(n, w, seed=3, drop_last=drop_last)
        counts = {len(x) for x in lists}
        per = n // w if drop_last else -(-n // w)
        assert counts == {per}, (n, w, counts)
        order = DistSampler(n, w, 0, seed=3).order(np.arange(n)).tolist()
        glob = [lists[p % w][p // w] for p in range(per * w)]
        assert glob == [order[p % n] for p in range(per * w)], (n, w)


def test_empty_and_world_larger_than_n():
    s = DistSampler(0, 4, 1)
    assert len(s) == 0 and list(s) == []
    assert s.state_dict()["position"] == 0
    lists = ranks(3, 8, seed=1)
    assert all(len(x) == 1 for x in lists)
    assert sorted(set(sum(lists, []))) == [0, 1, 2]
    assert ranks(3, 8, seed=1, drop_last=True) == [[]] * 8


def test_bad_arguments():
    with pytest.raises(ValueError, match="rank"):
        DistSampler(10, 4, 4)
    with pytest.raises(ValueError, match="num_replicas"):
        DistSampler(10, 0, 0)
    with pytest.raises(ValueError, match="length"):
        DistSampler(-1, 1, 0)
    with pytest.raises(TypeError, match="len"):
        DistSampler(object(), 1, 0)
    s = DistSampler(10, 1, 0)
    with pytest.raises(ValueError, match="epoch=-3"):     # its state would be refused
        s.set_epoch(-3)
    assert s.epoch == 0
    s.load_state_dict(s.state_dict())


def test_defaults_from_the_dataset_comm():
    comm = world()
    ds = DistDataset(Source("int"), fresh_name("smp"), comm)
    try:
        s = DistSampler(ds, seed=4)
        ok = (s.num_replicas, s.rank) == (comm.Get_size(), comm.Get_rank())
        # every rank computed its part of one order: together, each sample once
        got = comm.allgather(list(s)[:len(ds) // comm.Get_size()])
        flat = sum(got, [])
        ok = ok and len(set(flat)) == len(flat)
    finally:
        ds.free()
    assert_all(comm, ok, f"num_replicas/rank {s.num_replicas}/{s.rank}")
    import torch.distributed as dist
    if not dist.is_initialized():
        with pytest.raises(ValueError, match="num_replicas"):
            DistSampler(range(10))


def test_with_torch_dataloader():
    """DataLoader(sampler=DistSampler): the batches follow the order; with
    workers it prefetches, so the state is taken with consumed= steps·batch."""
    s = DistSampler(50, 2, 1, seed=9)
    order = list(s)
    dl = DataLoader(range(50), batch_size=4, sampler=s, num_workers=0)
    batches = [b.tolist() for b in dl]
    assert sum(batches, []) == order
    st = s.state_dict(consumed=3 * 4)
    assert st["position"] == 3 * 4 * 2
    s2 = DistSampler(50, 2, 1, seed=9)
    s2.load_state_dict(st)
    assert [b.tolist() for b in DataLoader(range(50), batch_size=4, sampler=s2)] == \
        batches[3:]


# ------------------------------------------------------------------ state ---
@pytest.mark.parametrize("drop_last", [False, True])
def test_same_world_resume(drop_last, owner):
    if not owner:
        return
    n, w = 103, 4
    for epoch in (0, 5):
        full = []
        for r in range(w):
            s = DistSampler(n, w, r, seed=11, drop_last=drop_last)
            s.set_epoch(epoch)
            full.append(list(s))
        for k in (0, 1, 10, len(full[0]) - 1, len(full[0])):
            s = DistSampler(n, w, 0, seed=11, drop_last=drop_last)
            s.set_epoch(epoch)
            it = iter(s)
            for _ in range(k):
                next(it)
            st = pickle.loads(pickle.dumps(s.state_dict()))
            json.dumps(st)                                  # plain data
            assert st["position"] == k * w and st["epoch"] == epoch
            del it
            for r in range(w):
                t = DistSampler(n, w, r, seed=11, drop_last=drop_last)
                t.load_state_dict(st)
                t.set_epoch(epoch)                          # the same epoch keeps it
                assert len(t) == len(full[r]) - k
                assert list(t) == full[r][k:], (epoch, k, r)
            t.set_epoch(epoch + 1)                          # another epoch: from 0
            assert len(t) == len(full[0])


def _resume_check(n, w1, c, w2, drop_last):
    """Consume c indices per rank at w1 ranks, resume at w2: what the two
    segments give, checked against 'the rest of the epoch exactly'."""
    before = []
    for r in range(w1):
        s = DistSampler(n, w1, r, seed=5, drop_last=drop_last)
        before += list(s)[:c]
        st = s.state_dict(consumed=c)
    after = []
    for r in range(w2):
        t = DistSampler(n, w2, r, seed=5, drop_last=drop_last)
        t.load_state_dict(st)
        after += list(t)
    p = st["position"]
    rest = max(n - p, 0)
    per = rest // w2 if drop_last else -(-rest // w2)
    assert len(after) == per * w2
    full = set(range(n))
    if p <= n:
        assert len(set(before)) == len(before) == p            # a prefix, no repeats
        got = collections.Counter(after)
        fresh = full - set(before)
        if drop_last:
            assert len(set(after)) == len(after)               # none repeated
            assert set(after) <= fresh                         # none consumed again
            assert len(fresh - set(after)) == rest % w2        # only the tail dropped
        else:
            assert set(after) >= fresh                         # none skipped
            pad = len(after) - rest
            assert pad < w2 and sum(got[i] - 1 for i in got) + \
                len(set(after) - fresh) == pad                 # padding only
    return before, after


@pytest.mark.parametrize("drop_last", [False, True])
def test_other_world_resume_covers_the_rest(drop_last, owner):
    if not owner:
        return
    n = 103
    for w1, w2 in ((4, 2), (2, 4), (4, 3), (3, 7), (1, 5), (8, 1)):
        per = n // w1 if drop_last else -(-n // w1)
        for c in (0, 1, 7, per // 2, per):
            _resume_check(n, w1, c, w2, drop_last)


def test_chained_resume_4_2_3(owner):
    if not owner:
        return
    n = 1000
    seen = []
    st = None
    for w, c in ((4, 50), (2, 100), (3, None)):
        lists = []
        for r in range(w):
            s = DistSampler(n, w, r, seed=8)
            if st is not None:
                s.load_state_dict(st)
            lists.append(list(s) if c is None else list(s)[:c])
        nxt = s.state_dict(consumed=len(lists[-1]))
        st = nxt
        for x in lists:
            seen += x
    cnt = collections.Counter(seen)
    assert set(cnt) == set(range(n))
    assert sum(cnt.values()) - n < 3 and max(cnt.values()) <= 2


def test_state_errors():
    s = DistSampler(100, 2, 0, seed=1)
    good = s.state_dict()
    cases = {"n": DistSampler(99, 2, 0, seed=1), "seed": DistSampler(100, 2, 0, seed=2),
             "shuffle": DistSampler(100, 2, 0, seed=1, shuffle=False)}
    for field, other in cases.items():
        with pytest.raises(ValueError, match=f"'{field}'"):
            other.load_state_dict(good)
    bad = [({**good, "position": "7"}, "position"), ({**good, "position": -1}, "position"),
           ({**good, "position": 10 ** 9}, "position"), ({**good, "epoch": 1.5}, "epoch"),
           ({**good, "format": "x"}, "format"), ({**good, "version": 99}, "version"),
           ({**good, "shuffle": 1}, "shuffle"), ({**good, "num_replicas": 0}, "num_replicas"),
           ({**good, "position": True}, "position")]
    for k in good:
        bad.append(({x: v for x, v in good.items() if x != k}, k))
    for state, field in bad:
        with pytest.raises(ValueError, match=f"'{field}'"):
            s.load_state_dict(state)
    with pytest.raises(ValueError, match="dict"):
        s.load_state_dict([1, 2])
    it = iter(s)
    next(it)
    with pytest.raises(RuntimeError, match="iterator"):
        s.load_state_dict(good)
    for _ in it:
        pass
    s.load_state_dict(good)                          # finished: fine
    with pytest.raises(ValueError, match="consumed"):
        s.state_dict(consumed=len(s) + 1)
