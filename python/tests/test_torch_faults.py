"""pyddstore.torch under faults (issue 16): a BaseException from source[i]
on one rank, a DistDataset dropped on one rank while the others keep theirs,
free() in a forked child, negative indices, bad DDSTORE_AFFINITY_* values.

Every rank runs every test (1, 2 or 4 ranks)."""
import gc
import os
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import pyddstore  # noqa: E402
from _torch_util import (N_ODD, Source, assert_all, fresh_name, make_sample,  # noqa: E402
                         same, world)
from pyddstore.torch import DistDataset, ThreadDataLoader, WindowedDataset  # noqa: E402


# ------------------------------------------- BaseException from source[i] --
class _Raising(torch.utils.data.Dataset):
    def __init__(self, exc, at):
        self.exc, self.at = exc, at

    def __len__(self):
        return N_ODD

    def __getitem__(self, i):
        if i == self.at:
            raise self.exc("stop at %d" % i)
        return make_sample("tuple", i)


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit, GeneratorExit])
@pytest.mark.parametrize("chunk", [None, 3])
def test_base_exception_from_source_on_one_rank(exc, chunk, monkeypatch):
    """The last rank's source raises a BaseException that is not an Exception:
    it re-raises there, the others raise RuntimeError naming that rank and the
    exception (they used to wait in allgather: the collective timeout bounds
    the test without the fix), and the job goes on."""
    comm = world()
    monkeypatch.setenv("DDSTORE_COLLECTIVE_TIMEOUT_S", "60")
    last = comm.Get_size() - 1
    src = _Raising(exc, N_ODD - 2)      # owned by the last rank
    ok, msg = False, "did not raise"
    try:
        DistDataset(src, fresh_name("be"), comm, chunk_size=chunk)
    except exc as e:
        ok = comm.Get_rank() == last and f"stop at {N_ODD - 2}" in str(e)
        msg = f"{type(e).__name__}: {e}"
    except RuntimeError as e:
        ok = comm.Get_rank() != last and f"rank {last}" in str(e) and exc.__name__ in str(e)
        msg = f"RuntimeError: {e}"
    except BaseException as e:  # noqa: BLE001
        msg = f"{type(e).__name__}: {e}"
    assert_all(comm, ok, msg)
    ds = DistDataset(Source("tuple"), fresh_name("ok"), comm)   # still usable
    ds.free()


# ------------------------------------------- dropped without free() --------
def test_dataset_dropped_on_one_rank(monkeypatch):
    """Rank 0 drops a DistDataset that the others keep (a traceback after
    collate_fn raised there, say) and builds the next one with them: the
    drop is local, nobody waits."""
    comm = world()
    monkeypatch.setenv("DDSTORE_COLLECTIVE_TIMEOUT_S", "60")
    ds = DistDataset(Source("dict"), fresh_name("drop"), comm)
    comm.Barrier()
    took = 0.0
    if comm.Get_rank() == 0:
        t0 = time.monotonic()
        del ds
        gc.collect()
        took = time.monotonic() - t0
        ds = None
    ds2 = DistDataset(Source("tuple"), fresh_name("next"), comm)
    bad = same(ds2[N_ODD - 1], make_sample("tuple", N_ODD - 1))
    ds2.free()
    assert_all(comm, not bad and took < 10, bad or f"drop took {took:.1f} s")
    del ds
    gc.collect()


# ------------------------------------------- free() in a forked child ------
def test_free_in_a_forked_child_raises():
    comm = world()
    ds = DistDataset(Source("tuple"), fresh_name("fk"), comm)
    comm.Barrier()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            ds.free()
            msg = "free() did not raise"
        except pyddstore.DDStoreError as e:
            msg = "ok" if "forked child" in str(e) else str(e)
        except BaseException as e:  # noqa: BLE001
            msg = f"{type(e).__name__}: {e}"
        os.write(w, msg.encode())
        os._exit(0)
    os.close(w)
    t0 = time.monotonic()
    status = None
    while time.monotonic() - t0 < 60:
        done, st = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            status = os.waitstatus_to_exitcode(st)
            break
        time.sleep(0.05)
    if status is None:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    with os.fdopen(r) as f:
        report = f.read()
    bad = same(ds[3], make_sample("tuple", 3))      # the parent's dataset works
    ds.free()                                       # and its free() is collective
    assert_all(comm, status == 0 and report == "ok" and not bad,
               f"child {status}: {report!r}; {bad}")


# ------------------------------------------- negative indices --------------
def test_negative_indices_as_python_sequences():
    """ds[-1], ds.__getitems__([-1]) and a loader batch with -1 agree: a
    negative index counts from the end (__getitems__ used to refuse it);
    below -len both raise IndexError."""
    comm = world()
    ds = DistDataset(Source("dict"), fresh_name("neg"), comm)
    try:
        n = len(ds)
        bad = same(ds[-1], make_sample("dict", n - 1), "ds[-1]")
        got = ds.__getitems__([-1, 0, -n, 2 - n])
        for g, i in zip(got, [n - 1, 0, 0, 2]):
            bad = bad or same(g, make_sample("dict", i), f"items[{i}]")
        batch = ds._collate([-1, 1])
        want = ds._collate([n - 1, 1])
        bad = bad or same(batch, want, "collate")
        for call in (lambda: ds[-n - 1], lambda: ds.__getitems__([0, -n - 1]),
                     lambda: ds[n], lambda: ds.__getitems__([n]),
                     lambda: ds._collate([-n - 1])):
            try:
                call()
                bad = bad or "no IndexError"
            except IndexError as e:
                if "out of range" not in str(e):
                    bad = bad or str(e)
        w = WindowedDataset(ds, 3)
        m = len(w)
        bad = bad or same(w.__getitems__([-1])[0], w[m - 1], "w.items[-1]")
        bad = bad or same(w[-m], w[0], "w[-m]")
        with pytest.raises(IndexError):
            w.__getitems__([-m - 1])
    finally:
        ds.free()


def test_single_index_types():
    """ds[i] takes what operator.index takes (numpy and bool integers too):
    a float or a string is a TypeError, an index beyond int64 an IndexError
    naming it (the check is the extension's), never a wrong row."""
    comm = world()
    ds = DistDataset(Source("tuple"), fresh_name("idx"), comm)
    try:
        n = len(ds)
        bad = same(ds[np.int64(3)], ds[3], "ds[np.int64(3)]") or \
            same(ds[True], ds[1], "ds[True]") or same(ds[-n], ds[0], "ds[-n]")
        for i, exc in ((1.5, TypeError), ("1", TypeError), (2 ** 70, IndexError),
                       (-2 ** 70, IndexError), (n, IndexError)):
            try:
                ds[i]
                bad = bad or f"ds[{i!r}]: no {exc.__name__}"
            except exc as e:
                if exc is IndexError and (f"index {i} out of range" not in str(e) or
                                          ds.name not in str(e)):
                    bad = bad or f"ds[{i!r}]: {e}"
        assert_all(comm, not bad, bad)
    finally:
        ds.free()
    assert_all(comm, not bad, bad)


# ------------------------------------------- DDSTORE_AFFINITY_* ------------
@pytest.mark.parametrize("var,value", [("DDSTORE_AFFINITY_WIDTH", "x"),
                                       ("DDSTORE_AFFINITY_WIDTH", "-2"),
                                       ("DDSTORE_AFFINITY_OFFSET", "1.5"),
                                       ("DDSTORE_AFFINITY_OFFSET", "-1")])
def test_bad_affinity_raises_naming_it(var, value, monkeypatch):
    """A bad value raises ValueError naming the variable and the value in the
    calling thread when the loader is made (it used to end every worker
    thread: "worker threads exited unexpectedly").  The settings are read
    once, when the loader is made: a value set afterwards does not apply to
    it (its epochs run pinned as it was made)."""
    comm = world()
    ds = DistDataset(Source("tuple"), fresh_name("aff"), comm)
    try:
        monkeypatch.setenv(var, value)
        with pytest.raises(ValueError, match=f"{var}='{value}'"):
            ThreadDataLoader(ds, batch_size=4, num_workers=2)
        monkeypatch.delenv(var)
        loader = ThreadDataLoader(ds, batch_size=4, num_workers=2)
        monkeypatch.setenv(var, value)     # changed after construction: not read
        assert sum(1 for _ in loader) == (N_ODD + 3) // 4
        monkeypatch.delenv(var)
        assert sum(1 for _ in loader) == (N_ODD + 3) // 4
        loader.close()
    finally:
        ds.free()
    assert_all(comm, True)
