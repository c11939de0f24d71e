"""Randomised differential check of every read against a reference.

Every rank builds the same description of seven variables from one seed (four
fixed ones of random dtype, row width and rows per rank, some ranks holding
none; three ragged ones with samples of 0-6 element rows), adds its share, and
then runs the same random sequence of operations: `get_batch` of random rows
(repeats, any order, every owner), `get` of ranges that cross owners,
`sizes`, `get_ragged` with and without `out=`, and rounds of `update` /
`update_ragged` of random local ranges followed by `epoch_begin()` /
`epoch_end()`.  Each row's value encodes (variable, row, column, version), so
every rank checks every byte it read without talking to the others: a wrong
row, a stale row after an epoch, or a write past the total is counted and the
test fails naming the first ones.  Methods 0 and 1 (where libfabric is built).
"""
import numpy as np
import pytest
from mpi4py import MPI

import pyddstore

pytestmark = pytest.mark.skipif(not pyddstore.HAVE_MPI,
                                reason="these tests run over MPI (HAVE_MPI False)")

DTYPES = [np.float32, np.int64, np.uint8, np.float64, np.int32, np.float16]


def _methods():
    return [0, 1] if pyddstore.HAVE_OFI else [0]


def _value(vid, ver, row, disp, dt):
    """Rows `row` (with versions `ver`) of variable `vid`: exact in every
    dtype (values below 251)."""
    c = np.arange(disp)
    v = (row[:, None] * 131 + c[None, :] * 7 + vid * 1009 + ver[:, None] * 17) % 251
    return v.astype(dt).reshape(len(row), disp)


def _split(g, R, most):
    counts = g.integers(0, most, R)
    if g.random() < 0.3:
        counts[g.integers(R)] = 0
    if counts.sum() == 0:
        counts[0] = 3
    return np.concatenate([[0], np.cumsum(counts)])


class _Ragged:
    def __init__(self, vid, dt, disp, off, lens):
        self.vid, self.dt, self.disp, self.off, self.lens = vid, dt, disp, off, lens
        self.ver = np.zeros(len(lens), np.int64)

    def sample(self, s):
        e = np.arange(self.lens[s])
        return _value(self.vid, np.full(len(e), self.ver[s]), s * 10 + e, self.disp, self.dt)

    def samples(self, ss):
        return np.concatenate([self.sample(s) for s in ss] +
                              [np.empty((0, self.disp), self.dt)])


@pytest.mark.parametrize("method", _methods(), ids=lambda m: f"method{m}")
@pytest.mark.parametrize("seed", [3, 17])
def test_random_reads_match_reference(method, seed):
    comm = MPI.COMM_WORLD
    R, me = comm.Get_size(), comm.Get_rank()
    g = np.random.default_rng(seed)                       # the same on every rank
    mine = np.random.default_rng(seed * 1000 + me + 1)    # this rank's reads
    store = pyddstore.PyDDStore(comm, method=method)
    fixed, ragged = [], []
    for vid in range(4):
        dt, disp = DTYPES[g.integers(len(DTYPES))], int(g.integers(1, 40))
        off = _split(g, R, 30)
        ver = np.zeros(int(off[-1]), np.int64)
        rows = np.arange(off[me], off[me + 1])
        store.add(f"v{vid}", _value(vid, ver[rows], rows, disp, dt))
        fixed.append((f"v{vid}", vid, dt, disp, off, ver))
    for vid in range(4, 7):
        dt, disp = DTYPES[g.integers(len(DTYPES))], int(g.integers(1, 20))
        off = _split(g, R, 25)
        rg = _Ragged(vid, dt, disp, off, g.integers(0, 7, int(off[-1])))
        store.add_ragged(f"r{vid}", rg.samples(range(off[me], off[me + 1])),
                         rg.lens[off[me]:off[me + 1]])
        ragged.append((f"r{vid}", rg))

    wrong = []
    for it in range(150):
        pick = int(g.integers(7))
        op = g.random()
        if op < 0.15:
            # every rank rewrites some of its rows (the others' reads of the
            # old rows are over: barrier), then an epoch makes them visible
            comm.Barrier()
            for _ in range(int(g.integers(1, 4))):
                r = int(g.integers(R))
                if pick < 4:
                    name, vid, dt, disp, off, ver = fixed[pick]
                else:
                    name, rg = ragged[pick - 4]
                    off, ver = rg.off, rg.ver
                cnt = int(off[r + 1] - off[r])
                if cnt == 0:
                    continue
                a = int(g.integers(cnt))
                b = int(g.integers(a + 1, cnt + 1))
                ver[off[r] + a:off[r] + b] += 1
                if r != me:
                    continue
                if pick < 4:
                    rows = np.arange(off[r] + a, off[r] + b)
                    store.update(name, _value(vid, ver[rows], rows, disp, dt), a)
                else:
                    store.update_ragged(name, rg.samples(range(off[r] + a, off[r] + b)),
                                        a, b - a)
            store.epoch_begin()
            store.epoch_end()
            continue
        if pick < 4:
            name, vid, dt, disp, off, ver = fixed[pick]
            total = int(off[-1])
            if op < 0.3:
                start = int(mine.integers(total))
                rows = np.arange(start, start + int(mine.integers(1, total - start + 1)))
                out = np.empty((len(rows), disp), dt)
                store.get(name, out, start)
            else:
                rows = mine.integers(0, total, int(mine.integers(1, 300)))
                out = np.empty((len(rows), disp), dt)
                store.get_batch(name, out, rows)
            bad = np.where((out != _value(vid, ver[rows], rows, disp, dt)).any(axis=1))[0]
            if len(bad):
                wrong.append(f"iteration {it}: {name} rows {rows[bad[:5]].tolist()} "
                             f"({len(bad)} of {len(rows)})")
        else:
            name, rg = ragged[pick - 4]
            idx = mine.integers(0, int(rg.off[-1]), int(mine.integers(1, 300)))
            if op < 0.3:
                if not np.array_equal(store.sizes(name, idx), rg.lens[idx]):
                    wrong.append(f"iteration {it}: sizes of {name}")
                continue
            if mine.random() < 0.5:
                out = np.full((int(rg.lens[idx].sum()) + 3, rg.disp), 99, rg.dt)
                vals, lens = store.get_ragged(name, idx, out=out)
                if not (out[len(vals):] == 99).all():
                    wrong.append(f"iteration {it}: {name}: rows after the total written")
            else:
                vals, lens = store.get_ragged(name, idx)
            if not (np.array_equal(lens, rg.lens[idx]) and
                    np.array_equal(vals, rg.samples(idx))):
                wrong.append(f"iteration {it}: get_ragged of {name}")
    store.free()
    n = comm.allreduce(len(wrong))
    assert n == 0, f"{n} wrong reads over {R} ranks; this rank's first: {wrong[:3]}"
