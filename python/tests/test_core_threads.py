"""Reads from many Python threads: correct values, and proof that reads run
with the GIL released (their C-side time windows overlap)."""
import threading

import numpy as np
import pytest

from pyddstore import _core
from _util import add_var, intervals_overlap, ticks_during_reads, values

NTHREADS = 8
DISP = 65536         # float32: 256 KiB rows, 4 MiB per batch of 16


def _run_threads(target, n=NTHREADS):
    errors = []

    def wrap(t):
        try:
            target(t)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append((t, repr(e)))

    threads = [threading.Thread(target=wrap, args=(t,)) for t in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not any(th.is_alive() for th in threads), "a reader thread hung"
    assert not errors, errors


def test_eight_threads_read_one_variable_concurrently(store):
    off = add_var(store, "big", np.float32, DISP)
    total = off[-1]
    ref = values(np.float32, range(total), DISP)
    batch, iters = 16, 8
    windows = []
    lock = threading.Lock()              # only guards the result list

    def round_(seed):
        start = threading.Barrier(NTHREADS)

        def reader(t):
            rng = np.random.default_rng(seed + 100 * store.rank + t)
            out = np.empty((batch, DISP), np.float32)
            mine = []
            start.wait()
            for i in range(iters):
                if i % 3 == 0:
                    n = min(batch, total)
                    lo = int(rng.integers(0, total - n + 1))
                    store.get("big", out[:n], lo)
                    w = _core._last_read_window()
                    assert np.array_equal(out[:n], ref[lo:lo + n])
                else:
                    idx = rng.integers(0, total, batch)
                    store.get_batch("big", out, idx)
                    w = _core._last_read_window()
                    assert np.array_equal(out, ref[idx])
                assert 0 < w[0] <= w[1]
                mine.append((t, w[0], w[1]))
            with lock:
                windows.extend(mine)

        _run_threads(reader)

    # Every read is checked.  With the GIL held during a read no other
    # thread could be inside a read at the same time, so overlapping C-side
    # windows (taken with the GIL released) prove that it is released.  On a
    # loaded machine a round may happen to run its reads one after the
    # other: run up to 10 rounds.
    for r in range(10):
        round_(1000 * r)
        if intervals_overlap(windows):
            break
    assert len(windows) % (NTHREADS * iters) == 0
    assert intervals_overlap(windows), "no two reads overlapped in time"


def test_python_runs_while_a_read_is_in_flight(store):
    """Deterministic GIL check: while one thread is inside a long read, the
    main thread keeps executing Python code (time stamps inside the read's
    window)."""
    off = add_var(store, "big", np.float32, DISP)
    total = off[-1]
    idx = np.arange(256) % total                 # 64 MiB per read
    out = np.empty((len(idx), DISP), np.float32)
    win = []

    def reader():
        for _ in range(20):
            store.get_batch("big", out, idx)
            win.append(_core._last_read_window())
        return win

    inside = ticks_during_reads(reader)
    assert np.array_equal(out, values(np.float32, idx, DISP))
    assert inside > 0, "the main thread never ran during a read"


def test_thread_readers(store):
    off = add_var(store, "v", np.int64, 5)
    total = off[-1]

    def reader(t):
        with store.open_reader() as rd:
            assert rd.kind == "thread" and not rd.closed
            assert rd.info("v") == (total, 5, 8)
            rng = np.random.default_rng(t)
            out = np.empty((10, 5), np.int64)
            for _ in range(20):
                idx = rng.integers(0, total, 10)
                rd.get_batch("v", out, idx)
                np.testing.assert_array_equal(out, values(np.int64, idx, 5))
            rd.get("v", out[:1], total - 1)
            np.testing.assert_array_equal(out[:1], values(np.int64, [total - 1], 5))
            assert rd.get_profile("v")["calls"] >= 21
        assert rd.closed

    _run_threads(reader, 4)


def test_updates_and_reads_from_threads(store):
    """update() is local and releases the GIL too; threads updating
    disjoint rows of this rank's shard while others read it."""
    off = add_var(store, "v", np.float64, 4)
    lo, hi = off[store.rank], off[store.rank + 1]
    mine = hi - lo

    def worker(t):
        for k in range(50):
            if t % 2 == 0 and mine > 0:
                r = (t // 2 + k) % mine
                store.update("v", values(np.float64, [lo + r], 4), r)
            else:
                out = np.empty((off[-1], 4))
                store.get("v", out)
                np.testing.assert_array_equal(out, values(np.float64, range(off[-1]), 4))

    _run_threads(worker, 6)
