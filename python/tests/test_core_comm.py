"""Communicators, methods, readers and store handles."""
import ctypes
import os

import numpy as np
import pytest

import pyddstore
from pyddstore import DDStoreError, _core
from _util import add_var, layout, values

needs_mpi = pytest.mark.skipif(not pyddstore.HAVE_MPI,
                               reason="this build has no MPI (HAVE_MPI False)")


@needs_mpi
def test_mpi4py_world_and_split_communicators(store):
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    with pyddstore.PyDDStore(world) as s:
        got = (s.rank, s.size)
        off = add_var(s, "w", np.float64, 2)
        out = np.zeros((off[-1], 2))
        s.get("w", out)
    del s
    assert got == (world.rank, world.size) == (store.rank, store.size)
    np.testing.assert_array_equal(out, values(np.float64, range(off[-1]), 2))

    sub = world.Split(color=world.rank % 2, key=world.rank)
    sub_rank, sub_size = sub.rank, sub.size
    try:
        # Both groups at once (Open MPI 4.x: the windows of the two groups must
        # not share osc/rdma's backing files; ddmpi_ompi_cid.c).
        with pyddstore.PyDDStore(sub, method=0) as s:
            got = (s.rank, s.size)
            off = add_var(s, "w", np.int32, 3)
            out = np.zeros((off[-1], 3), np.int32)
            s.get("w", out)
        del s
    finally:
        sub.Free()
    assert got == (sub_rank, sub_size)
    assert off == [0] + list(np.cumsum([2 + (7 * r + 3) % 5 for r in range(sub_size)]))
    np.testing.assert_array_equal(out, values(np.int32, range(off[-1]), 3))


# colour of each world rank: contiguous groups of 2 (HydraGNN's ddstore_width),
# groups of 3 + 1, 1 + 3 and interleaved (odd/even) groups
SPLITS = {
    "width2": lambda r, n: r // 2,
    "width3": lambda r, n: r // 3,
    "one_and_rest": lambda r, n: 0 if r == 0 else 1,
    "odd_even": lambda r, n: r % 2,
}


@needs_mpi
@pytest.mark.parametrize("split", sorted(SPLITS))
def test_split_groups_create_windows_at_once(split):
    """Every group of a split creates and frees stores with several variables
    at the same time, repeatedly, with no method argument (method 0); every
    read is checked.  Open MPI 4.1 failed here (MPI_ERR_WIN in MPI_Win_create)
    or let two groups' windows share their state."""
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    sub = world.Split(SPLITS[split](world.rank, world.size), world.rank)
    dts = [np.float64, np.int32, np.uint8, np.int64]
    errors = []
    try:
        for rep in range(10):
            err = None
            world.Barrier()      # the groups create their windows at the same time
            s = pyddstore.PyDDStore(sub)
            try:
                offs = [add_var(s, f"v{k}", dt, k + 1) for k, dt in enumerate(dts)]
                for k, (dt, off) in enumerate(zip(dts, offs)):
                    out = np.zeros((off[-1], k + 1), dt)
                    s.get(f"v{k}", out)
                    np.testing.assert_array_equal(out, values(dt, range(off[-1]), k + 1))
                    rows = np.arange(off[-1])[::-1].copy()
                    s.get_batch(f"v{k}", out, rows)
                    np.testing.assert_array_equal(out, values(dt, rows, k + 1))
            except Exception as e:  # noqa: BLE001 - agreed below
                err = e
            finally:
                s.free()
            if err is not None:
                errors.append(f"rep {rep}: {type(err).__name__}: {err}")
    finally:
        sub.Free()
    every = world.allgather(errors)
    assert not any(every), f"{split}: " + "; ".join(
        f"rank {r}: {e}" for r, es in enumerate(every) for e in es)


class _Creations:
    """Names of files created in a directory since the last take() (inotify)."""
    IN_CREATE, IN_NONBLOCK = 0x100, 0o4000

    def __init__(self, path):
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(self.IN_NONBLOCK)
        if self.fd < 0 or self.libc.inotify_add_watch(
                self.fd, os.fsencode(path), self.IN_CREATE) < 0:
            raise OSError(ctypes.get_errno(), f"inotify on {path}")

    def take(self):
        names, buf = [], b""
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            buf += chunk
        i = 0
        while i + 16 <= len(buf):
            n = int.from_bytes(buf[i + 12:i + 16], "little")
            names.append(buf[i + 16:i + 16 + n].split(b"\0")[0].decode())
            i += 16 + n
        return names

    def close(self):
        os.close(self.fd)


@needs_mpi
@pytest.mark.parametrize("split", sorted(SPLITS))
def test_split_groups_window_files_never_shared(split):
    """Open MPI 4.x osc/rdma: each window has a shared-memory file per node
    named after its communicator's context id.  The groups of a split, all
    alive at once, must never use the same name (else windows created at the
    same time collide).  The groups take turns creating their stores (kept
    alive) so that the names each turn creates can be told apart; before the
    fix the groups' windows took the same ids, hence the same names."""
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    if "Open MPI v" not in MPI.Get_library_version() or \
            not MPI.Get_library_version().split("Open MPI v")[1][:2] in ("2.", "3.", "4."):
        pytest.skip("osc/rdma's file names are an Open MPI 2-4 matter")
    color = SPLITS[split](world.rank, world.size)
    colors = world.allgather(color)
    groups = sorted(set(colors))
    if sum(1 for g in groups if colors.count(g) > 1) < 2:
        pytest.skip(f"{split} at {world.size} ranks: fewer than two multi-rank groups")
    backing = os.environ.get("OMPI_MCA_osc_rdma_backing_directory", "/dev/shm")
    watch = _Creations(backing)
    sub = world.Split(color, world.rank)
    stores, made = [], {}
    try:
        for g in groups:
            watch.take()
            world.Barrier()
            if color == g:
                s = pyddstore.PyDDStore(sub)
                stores.append(s)
                for k in range(3):
                    add_var(s, f"v{k}", np.float64, 2)
            world.Barrier()
            made[g] = {n for n in watch.take() if n.startswith("osc_rdma.")}
        for s in stores:
            off = layout(s.size)
            for k in range(3):
                out = np.zeros((off[-1], 2))
                s.get(f"v{k}", out)
                np.testing.assert_array_equal(out, values(np.float64, range(off[-1]), 2))
    finally:
        for s in stores:
            s.free()
        sub.Free()
        watch.close()
    multi = [g for g in groups if colors.count(g) > 1]
    if not any(made[g] for g in multi):
        pytest.skip(f"no osc_rdma files in {backing}: another osc component")
    for i, a in enumerate(multi):
        for b in multi[i + 1:]:
            assert not made[a] & made[b], \
                f"{split}: groups {a} and {b} both created {sorted(made[a] & made[b])}"


@needs_mpi
def test_mpi4py_bad_communicators():
    from mpi4py import MPI
    with pytest.raises(ValueError, match="COMM_NULL"):
        pyddstore.PyDDStore(MPI.COMM_NULL)
    with pytest.raises(TypeError, match="intracommunicator"):
        pyddstore.PyDDStore(MPI.COMM_WORLD.group)


@needs_mpi
def test_rank_and_size_hints(store):
    s = pyddstore.PyDDStore(None, rank=store.rank, size=store.size)
    s.free()
    with pytest.raises(ValueError, match="rank"):
        pyddstore.PyDDStore(None, size=store.size + 1)


def test_methods_without_a_libfabric_transport():
    if _core.HAVE_OFI:
        pytest.skip("built with libfabric: methods 1/2 are tested by its tests")
    for m in (1, 2):
        with pytest.raises(DDStoreError, match="libfabric"):
            pyddstore.PyDDStore(None, method=m)


def test_method_from_environment(monkeypatch):
    monkeypatch.setenv("DDSTORE_METHOD", "9")
    with pytest.raises(ValueError, match="DDSTORE_METHOD"):
        pyddstore.PyDDStore(None, method=None)
    monkeypatch.setenv("DDSTORE_METHOD", "x")
    with pytest.raises(ValueError, match="DDSTORE_METHOD"):
        pyddstore.PyDDStore(None, method=None)
    if not pyddstore.HAVE_MPI:
        return
    monkeypatch.setenv("DDSTORE_METHOD", "0")
    s = pyddstore.PyDDStore(None, method=None)
    assert s.method == 0
    s.free()
    monkeypatch.delenv("DDSTORE_METHOD")
    s = pyddstore.PyDDStore(None, method=None)
    assert s.method == 0
    s.free()


def test_open_reader_and_close(store):
    off = add_var(store, "v", np.float32, 3)
    rd = store.open_reader()
    assert rd.store is store and rd.rank == store.rank and rd.size == store.size
    out = np.zeros((off[-1], 3), np.float32)
    rd.get("v", out)
    np.testing.assert_array_equal(out, values(np.float32, range(off[-1]), 3))
    rd.close()
    rd.close()                                      # idempotent
    with pytest.raises(DDStoreError, match="closed"):
        rd.get("v", out)
    with pytest.raises(DDStoreError, match="closed"):
        rd.info("v")
    assert "closed" in repr(rd)


def test_reader_keeps_its_store_alive():
    if not pyddstore.HAVE_MPI:
        pytest.skip("method 0 needs MPI")
    s = pyddstore.PyDDStore(None)
    off = add_var(s, "v", np.int64, 2)
    rd = s.open_reader()
    del s                                            # the reader holds it
    out = np.zeros((off[-1], 2), np.int64)
    rd.get("v", out)
    np.testing.assert_array_equal(out, values(np.int64, range(off[-1]), 2))
    st = rd.store
    rd.close()
    del rd
    st.free()


def _in_child(fn):
    """Run fn() in a forked child; its return value (or exception text) comes
    back through a pipe.  The child never calls MPI and leaves with _exit."""
    import pickle
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        try:
            res = ("ok", fn())
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            res = ("err", f"{type(e).__name__}: {e}")
        with os.fdopen(wfd, "wb") as f:
            pickle.dump(res, f)
        os._exit(0)
    os.close(wfd)
    with os.fdopen(rfd, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return pickle.loads(data)


def test_fork_reader_method0_reads_this_nodes_shards(store):
    """Method 0 in a forked process: no MPI; every shard of this node is read
    from the inherited shared memory, through fork_reader() or the store."""
    off = add_var(store, "v", np.float32, 3)
    total = off[-1]
    rows = [total - 1, 0, total // 2, 0]

    def child():
        rd = store.fork_reader()
        a = np.zeros((total, 3), np.float32)
        rd.get("v", a)
        b = np.zeros((len(rows), 3), np.float32)
        store.get_batch("v", b, rows)
        return rd.kind, a, b

    status, res = _in_child(child)
    ok = status == "ok" and res[0] == "forked" and \
        np.array_equal(res[1], values(np.float32, range(total), 3)) and \
        np.array_equal(res[2], values(np.float32, rows, 3))
    assert ok, res
    out = np.zeros((total, 3), np.float32)       # the parent's store is untouched
    store.get("v", out)
    np.testing.assert_array_equal(out, values(np.float32, range(total), 3))


@needs_mpi
def test_fork_reader_method0_other_node_is_a_clear_error(monkeypatch):
    """A shard not mapped here (another node; DDSTORE_MPI_SHM=0 simulates it)
    cannot be read after fork (no MPI there): an error naming ThreadDataLoader
    and method 1, never an MPI call.  This rank's own rows still read."""
    from mpi4py import MPI
    monkeypatch.setenv("DDSTORE_MPI_SHM", "0")
    s = pyddstore.PyDDStore(MPI.COMM_WORLD)
    try:
        off = add_var(s, "v", np.int64, 2)
        lo, hi = off[s.rank], off[s.rank + 1]

        def child():
            own = np.zeros((hi - lo, 2), np.int64)
            s.get("v", own, lo)
            out = np.zeros((off[-1], 2), np.int64)
            try:
                s.get("v", out)
            except DDStoreError as e:
                return own, str(e)
            return own, None

        status, res = _in_child(child)
        assert status == "ok", res
        np.testing.assert_array_equal(res[0], values(np.int64, range(lo, hi), 2))
        if s.size == 1:
            assert res[1] is None
        else:
            assert res[1] is not None and "forked" in res[1] and \
                "ThreadDataLoader" in res[1] and "method=1" in res[1], res[1]
    finally:
        s.free()


@needs_mpi
@pytest.mark.parametrize("shape", ["one_owner", "every_owner"])
def test_method0_gets_from_several_owners(monkeypatch, shape):
    """Rows of other nodes (DDSTORE_MPI_SHM=0: every owner's rows by MPI_Get):
    a batch from one owner is completed by that owner's flush, a batch from
    several by one MPI_Win_flush_local_all; every row right either way, with
    repeats and any order."""
    from mpi4py import MPI
    monkeypatch.setenv("DDSTORE_MPI_SHM", "0")
    s = pyddstore.PyDDStore(MPI.COMM_WORLD)
    try:
        off = add_var(s, "v", np.int64, 3)
        total = off[-1]
        rng = np.random.default_rng(s.rank)
        if shape == "one_owner":
            peer = (s.rank + 1) % s.size
            idx = rng.integers(off[peer], off[peer + 1], 40)
        else:
            idx = rng.integers(0, total, 200)
            idx[:s.size] = off[:-1]              # every owner at least once
        for _ in range(3):
            out = np.full((len(idx), 3), -1, np.int64)
            s.get_batch("v", out, idx)
            np.testing.assert_array_equal(out, values(np.int64, idx, 3))
    finally:
        s.free()


def test_join_needs_method2(store):
    with pytest.raises(ValueError, match="method=2"):
        store.join("v")


def _libddstore():
    """libddstore.so as _core loaded it (the one next to the modules)."""
    import glob
    here = os.path.dirname(_core.__file__)
    paths = glob.glob(os.path.join(here, "libddstore.so"))
    if not paths:
        pytest.skip("libddstore.so is not next to _core (not a shared build)")
    lib = ctypes.CDLL(paths[0])
    lib.ddstore_handle_enter.argtypes = [ctypes.c_uint64] + [ctypes.POINTER(ctypes.c_void_p)] * 3
    lib.ddstore_handle_enter.restype = ctypes.c_int
    lib.ddstore_handle_leave.argtypes = [ctypes.c_void_p]
    lib.dds_last_error.restype = ctypes.c_char_p
    return lib


def test_handles_no_capsule(store):
    """No C API capsule: the torch extension finds a store or reader by its
    libddstore handle (ddstore/pin.h) in the same libddstore.so."""
    assert not hasattr(_core, "_C_API")
    lib = _libddstore()
    pin, st, rd = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    h = store._handle
    assert isinstance(h, int) and h > 0
    assert lib.ddstore_handle_enter(h, ctypes.byref(pin), ctypes.byref(st), ctypes.byref(rd)) == 0
    assert st.value and not rd.value
    lib.ddstore_handle_leave(pin)
    reader = store.open_reader()
    hr = reader._handle
    assert hr not in (0, h)
    st2 = ctypes.c_void_p()
    assert lib.ddstore_handle_enter(hr, ctypes.byref(pin), ctypes.byref(st2), ctypes.byref(rd)) == 0
    assert st2.value == st.value and rd.value
    lib.ddstore_handle_leave(pin)
    reader.close()
    with pytest.raises(DDStoreError, match="closed"):
        reader._handle
    # the stale handle of the closed reader: -DDS_EFREED, nothing pinned
    assert lib.ddstore_handle_enter(hr, ctypes.byref(pin), ctypes.byref(st2),
                                    ctypes.byref(rd)) < 0
    assert b"closed" in lib.dds_last_error()


def test_version_and_flags():
    assert isinstance(pyddstore.__version__, str) and pyddstore.__version__.count(".") == 2
    assert isinstance(pyddstore.HAVE_MPI, bool)
    assert _core.core_version().count(".") == 2
    assert os.environ.get("FI_CXI_DISABLE_HOST_REGISTER")


class _SelfComm:
    """A communicator object the way FileComm / torch groups present
    themselves: a `_dds_comm` capsule (pyddstore_api.h)."""

    @property
    def _dds_comm(self):
        return _core._self_comm()


def test_communicator_provider_objects():
    # resolved through the capsule; method 0 then needs an MPI communicator
    exc = ValueError if pyddstore.HAVE_MPI else DDStoreError
    with pytest.raises(exc, match="method 0 .*MPI"):
        pyddstore.PyDDStore(_SelfComm(), method=0)
    if not _core.HAVE_OFI:
        with pytest.raises(DDStoreError, match="libfabric"):
            pyddstore.PyDDStore(_SelfComm(), method=1)
    with pytest.raises(ValueError, match="rank"):
        pyddstore.PyDDStore(_SelfComm(), size=3)

    class Bad:
        _dds_comm = "not a capsule"
    with pytest.raises(TypeError, match="_dds_comm"):
        pyddstore.PyDDStore(Bad())

    class Broken:
        @property
        def _dds_comm(self):
            raise RuntimeError("boom")
    with pytest.raises(RuntimeError, match="boom"):
        pyddstore.PyDDStore(Broken())
