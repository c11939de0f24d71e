"""Update visibility: epoch_begin() / epoch_end() (docs/concurrency.md).

After epoch_begin() returns, every update()/init() that any rank finished
before it entered epoch_begin() is visible to every read; after epoch_end()
returns, every rank has finished the reads it made before entering it.  The
original DDStore fenced its windows there, and its users (HydraGNN, the VAE)
rely on it.  These tests repeat the pattern many times, on every rank, with
rows of every owner, for method 0 and (where libfabric is built) method 1.
"""
import numpy as np
import pytest

import pyddstore

ROWS = 512          # rows per rank
DISP = 16
REPS = 12


def _methods():
    ms = []
    if pyddstore.HAVE_MPI:
        ms.append(0)
        if pyddstore.HAVE_OFI:
            ms.append(1)
    return ms


pytestmark = pytest.mark.skipif(not pyddstore.HAVE_MPI,
                                reason="these tests run over MPI (HAVE_MPI False)")


def _expected(owner, rep, rows):
    """Row values of `owner` at repetition `rep` (row-dependent, exact)."""
    r = np.asarray(rows, dtype=np.float64).reshape(-1, 1)
    return (owner + 1) * 1e6 + rep * 1e3 + r + np.zeros((1, DISP))


def _check_all(s, name, rep, size, rng):
    """Read every rank's rows (a contiguous range per owner and a random
    batch over all owners); return the number of wrong rows."""
    bad = 0
    for owner in range(size):
        out = np.zeros((ROWS, DISP))
        s.get(name, out, owner * ROWS)
        bad += int(np.any(out != _expected(owner, rep, range(ROWS)), axis=1).sum())
    idx = rng.integers(0, size * ROWS, 4 * ROWS)
    b = np.zeros((len(idx), DISP))
    s.get_batch(name, b, idx)
    exp = np.concatenate([_expected(int(g) // ROWS, rep, [int(g) % ROWS]) for g in idx])
    bad += int(np.any(b != exp, axis=1).sum())
    return bad


@pytest.mark.parametrize("method", _methods())
def test_updates_before_epoch_begin_are_seen_by_every_rank(method):
    s = pyddstore.PyDDStore(None, method=method)
    rank, size = s.rank, s.size
    rng = np.random.default_rng(rank)
    bad = []
    try:
        for rep in range(REPS):
            name = f"v{rep % 3}"
            if rep < 3:
                s.init(name, ROWS, DISP, 8)     # zeros, published at once
            s.update(name, _expected(rank, rep, range(ROWS)), 0)
            s.epoch_begin()
            bad.append(_check_all(s, name, rep, size, rng))
            s.epoch_end()
    finally:
        s.free()
    assert sum(bad) == 0, f"rank {rank}: stale rows per repetition {bad}"


@pytest.mark.parametrize("method", _methods())
def test_reads_before_epoch_end_never_see_later_updates(method):
    """Reads made before epoch_end() return the rows of that epoch even when
    owners update right after their own epoch_end()."""
    s = pyddstore.PyDDStore(None, method=method)
    rank, size = s.rank, s.size
    rng = np.random.default_rng(100 + rank)
    bad = []
    try:
        s.init("w", ROWS, DISP, 8)
        for rep in range(REPS):
            s.update("w", _expected(rank, rep, range(ROWS)), 0)
            s.epoch_begin()
            bad.append(_check_all(s, "w", rep, size, rng))
            s.epoch_end()
    finally:
        s.free()
    assert sum(bad) == 0, f"rank {rank}: rows of another epoch per repetition {bad}"
