"""A process that outlives a variable never reads another variable's rows
(issue 36, item 1).

A process forked while variable `x` exists (a DataLoader worker, persistent
or not) keeps the store's description of `x`: its owners' addresses, keys
and same-node mappings.  After every rank frees `x` and adds another
variable (`y`, or `x` again with other rows), the memory those describe may
hold the new variable's rows.  A read of the old `x` from such a process is
a DDStoreError naming the variable, for every method and path (same-node
mappings, the transport, this rank's own rows), never the new rows and
never the old ones presented as current.  A process forked after the
rebuild reads the new rows.

Run at 2 ranks:  tools/ddrun -n 2 -- .venv/bin/python -m pytest -q python/tests/test_fork_stale.py
"""
import gc
import os

import numpy as np
import pytest

import pyddstore

N, DISP = 6, 4

CASES = [pytest.param((0, None, None), id="m0")]
if pyddstore.HAVE_OFI:
    CASES += [pytest.param((1, "shm", "1"), id="m1-shm"),
              pytest.param((1, "shm", "0"), id="m1-shm-nomap"),
              pytest.param((1, "tcp", "1"), id="m1-tcp")]


def _rows(rank, k):
    """Rank `rank`'s shard of generation k: every value says (k, rank, row)."""
    g = np.arange(N, dtype=np.int64).reshape(-1, 1) + rank * N
    return (k * 1000000 + g * 100 + np.arange(DISP)).astype(np.int64)


@pytest.fixture(params=CASES)
def mstore(request, monkeypatch):
    method, fabric, map_shards = request.param
    if method == 0 and not pyddstore.HAVE_MPI:
        pytest.skip("method 0 needs MPI and this build has none (HAVE_MPI False)")
    if fabric:
        monkeypatch.setenv("DDSTORE_FABRIC", fabric)
        monkeypatch.setenv("DDSTORE_OFI_MAP_SHARDS", map_shards)
        monkeypatch.setenv("DDSTORE_FORK_WORKERS", "1")
    s = pyddstore.PyDDStore(None, method=method)
    yield s
    s.free()


def _in_child(body):
    """Fork; the child waits for the parent's go, runs body() and reports
    what it returned or raised.  Returns (go, result): call go() once the
    parent is ready, then result() for the child's report."""
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: no pytest, nothing raised out
        code = 1
        try:
            os.close(w1)
            os.close(r2)
            os.read(r1, 1)
            try:
                msg = "ok " + repr(body())
                code = 0
            except BaseException as e:  # noqa: BLE001 - reported to the parent
                msg = "raised %s: %s" % (type(e).__name__, e)
            os.write(w2, msg.encode()[:4000])
        finally:
            os._exit(code)
    os.close(r1)
    os.close(w2)

    def go():
        os.write(w1, b"g")
        os.close(w1)

    def result():
        chunks = []
        while True:
            b = os.read(r2, 4096)
            if not b:
                break
            chunks.append(b)
        os.close(r2)
        os.waitpid(pid, 0)
        return b"".join(chunks).decode()

    return go, result


def _read_x(s):
    """Every row of x: the peer's, then this rank's own."""
    out = np.zeros((N * s.size, DISP), np.int64)
    s.get_batch("x", out, np.arange(N * s.size)[::-1].copy())
    return out


@pytest.mark.parametrize("again", ["y", "x"], ids=["other-name", "same-name"])
def test_child_forked_before_free_cannot_read_the_next_variable(mstore, again):
    s = mstore
    s.add("x", _rows(s.rank, 1))
    np.testing.assert_array_equal(_read_x(s)[::-1],
                                  np.concatenate([_rows(r, 1) for r in range(s.size)]))
    go, result = _in_child(lambda: _read_x(s).tolist())
    try:
        s.free()                           # every rank frees x ...
        s.add(again, _rows(s.rank, 2))     # ... and adds the next one
    finally:
        go()
    got = result()
    assert got.startswith("raised DDStoreError"), got
    assert "'x'" in got and "freed" in got, got


def test_child_forked_before_free_reads_the_other_store(mstore):
    """Two stores (two datasets): the one freed and rebuilt is an error in
    the child, the other one still reads its rows there."""
    s = mstore
    s.add("x", _rows(s.rank, 1))
    other = pyddstore.PyDDStore(None, method=s.method)
    try:
        other.add("x", _rows(other.rank, 3))
        want_other = np.concatenate([_rows(r, 3) for r in range(s.size)])[::-1]

        def body():
            try:
                _read_x(s)
            except pyddstore.DDStoreError as e:
                stale = str(e)
            else:
                return "the freed x was read"
            np.testing.assert_array_equal(_read_x(other), want_other)
            return stale

        go, result = _in_child(body)
        try:
            s.free()
            s.add("x", _rows(s.rank, 2))
        finally:
            go()
        got = result()
        assert got.startswith("ok ") and "'x'" in got and "freed" in got, got
    finally:
        other.free()


def test_child_forked_after_the_rebuild_reads_it(mstore):
    s = mstore
    s.add("x", _rows(s.rank, 1))
    s.free()
    s.add("x", _rows(s.rank, 2))
    go, result = _in_child(lambda: _read_x(s).tolist())
    go()
    got = result()
    want = np.concatenate([_rows(r, 2) for r in range(s.size)])[::-1]
    assert got == "ok " + repr(want.tolist()), got[:300]


def _torch_case(method):
    torch = pytest.importorskip("torch", reason="the DataLoader case needs torch")
    from pyddstore.torch import DistDataset
    return torch, DistDataset


@pytest.mark.parametrize("method", [0, 1])
def test_persistent_workers_of_a_freed_dataset(method, monkeypatch):
    """The realistic form: DataLoader(persistent_workers=True) over dataset
    `a`; a.free() and a new DistDataset `b` of the same shape; iterating the
    old loader is an error (it returned rows of `b` as rows of `a`), and a
    loader made over `b` reads `b`."""
    if method == 0 and not pyddstore.HAVE_MPI:
        pytest.skip("method 0 needs MPI and this build has none (HAVE_MPI False)")
    if method == 1 and not pyddstore.HAVE_OFI:
        pytest.skip("method 1 needs libfabric; this build has none (HAVE_OFI False)")
    torch, DistDataset = _torch_case(method)
    if method == 1:
        monkeypatch.setenv("DDSTORE_FABRIC", "shm")
        monkeypatch.setenv("DDSTORE_FORK_WORKERS", "1")
    n = 100
    src = [torch.arange(i * 8, i * 8 + 8, dtype=torch.float32) for i in range(n)]
    src_b = [s + 100000 for s in src]
    a = DistDataset(torch.utils.data.TensorDataset(torch.stack(src)), "a", None,
                    method=method)
    loader = torch.utils.data.DataLoader(a, batch_size=10, num_workers=1,
                                         persistent_workers=True,
                                         multiprocessing_context="fork")
    assert sum(len(x) for (x,) in loader) == n          # the workers live on
    a.free()
    b = DistDataset(torch.utils.data.TensorDataset(torch.stack(src_b)), "b", None,
                    method=method)
    try:
        with pytest.raises(Exception, match=r"(?s)freed.*forked") as e:
            for (x,) in loader:
                assert (x < 100000).all(), "rows of b returned as rows of a"
        msg = "%r %s" % (e.value, e.value)
        del e, loader      # the exception's frames hold the loader and `a`
        assert "DDStoreError" in msg, msg
        fresh = torch.utils.data.DataLoader(b, batch_size=10, num_workers=1,
                                            multiprocessing_context="fork")
        got = torch.cat([x for (x,) in fresh])
        torch.testing.assert_close(got, torch.stack(src_b))
    finally:
        b.free()
        del a, b
        gc.collect()   # `a`'s store goes now, not at some later collection


def test_readers_opened_before_free(mstore):
    """A reader opened before free() reads what the store holds now: after
    free() and add() of x again, the new rows in this process; a
    fork_reader() made before the fork, in the child, the error."""
    s = mstore
    s.add("x", _rows(s.rank, 1))
    thread_reader = s.open_reader() if s.method != 0 else s
    fork_reader = s.fork_reader() if s.method != 0 else s

    def body():
        out = np.zeros((N * s.size, DISP), np.int64)
        fork_reader.get_batch("x", out, np.arange(N * s.size))
        return out.tolist()

    go, result = _in_child(body)
    try:
        s.free()
        s.add("x", _rows(s.rank, 2))
    finally:
        go()
    got = result()
    assert got.startswith("raised DDStoreError") and "freed" in got, got
    out = np.zeros((N * s.size, DISP), np.int64)
    thread_reader.get_batch("x", out, np.arange(N * s.size))
    np.testing.assert_array_equal(out, np.concatenate([_rows(r, 2) for r in range(s.size)]))
    if s.method != 0:
        thread_reader.close()
        fork_reader.close()


@pytest.mark.skipif(not pyddstore.HAVE_OFI,
                    reason="method 1 needs libfabric; this build has none (HAVE_OFI False)")
def test_forked_read_without_fork_workers_names_the_setting(monkeypatch):
    """A PyDDStore's own read of a peer's row in a forked process without
    DDSTORE_FORK_WORKERS=1 is an error that names the one setting that fixes
    it (issue 36 item 5; it named only fork_reader())."""
    monkeypatch.setenv("DDSTORE_FABRIC", "tcp")
    monkeypatch.delenv("DDSTORE_FORK_WORKERS", raising=False)
    s = pyddstore.PyDDStore(None, method=1)
    try:
        s.add("x", _rows(s.rank, 1))
        peer = (s.rank + 1) % s.size

        def body():
            out = np.zeros((1, DISP), np.int64)
            s.get("x", out, peer * N)
            return out.tolist()
        go, result = _in_child(body)
        go()
        got = result()
        if s.size == 1:
            assert got.startswith("ok "), got          # own rows: no reader needed
        else:
            assert "DDSTORE_FORK_WORKERS=1" in got and "fork_reader()" in got, got
    finally:
        s.free()
