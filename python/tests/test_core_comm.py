"""Communicators, methods, readers and the C API capsule."""
import ctypes
import os

import numpy as np
import pytest

import pyddstore
from pyddstore import DDStoreError, _core
from _util import add_var, values

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
        # One group at a time: Open MPI 4.1's osc/rdma names the shared-memory
        # backing file of a window after the communicator's context id, which
        # two disjoint groups can share, so windows of both groups alive at
        # once on one node collide (MPI_Win_create fails or hangs).
        for turn in (0, 1):
            if world.rank % 2 == turn:
                with pyddstore.PyDDStore(sub, method=0) as s:
                    got = (s.rank, s.size)
                    off = add_var(s, "w", np.int32, 3)
                    out = np.zeros((off[-1], 3), np.int32)
                    s.get("w", out)
                del s
            world.Barrier()
    finally:
        sub.Free()
    assert got == (sub_rank, sub_size)
    assert off == [0] + list(np.cumsum([2 + (7 * r + 3) % 5 for r in range(sub_size)]))
    np.testing.assert_array_equal(out, values(np.int32, range(off[-1]), 3))


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


def test_fork_reader_method0_is_a_clear_error(store):
    add_var(store, "v", np.float32, 1)
    # MPI cannot be used after fork: method 0 has no forked readers
    with pytest.raises(DDStoreError, match="forked"):
        store.fork_reader()


def test_join_needs_method2(store):
    with pytest.raises(ValueError, match="method=2"):
        store.join("v")


class _Api(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("version", ctypes.c_int)] + [
        (n, ctypes.c_void_p) for n in (
            "unwrap", "raise_error", "var_info", "var_offsets", "var_add",
            "get", "get_batch", "recv_register", "recv_unregister", "profile",
            "last_error", "strerror", "log_write", "log_enabled",
            "var_update", "acquire", "release", "keep_alive", "error")]


def test_c_api_capsule(store):
    cap = _core._C_API
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    p = get(cap, b"pyddstore._core._C_API")
    api = _Api.from_address(p)
    assert api.size == ctypes.sizeof(_Api)
    assert api.version >= 1
    for name, _ in _Api._fields_[2:]:
        assert getattr(api, name), name
    # unwrap accepts a store and a reader, and refuses anything else
    UNWRAP = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object,
                               ctypes.POINTER(ctypes.c_void_p),
                               ctypes.POINTER(ctypes.c_void_p))
    unwrap = UNWRAP(api.unwrap)
    st, rd = ctypes.c_void_p(), ctypes.c_void_p()
    assert unwrap(store, ctypes.byref(st), ctypes.byref(rd)) == 0
    assert st.value and not rd.value
    reader = store.open_reader()
    st2 = ctypes.c_void_p()
    assert unwrap(reader, ctypes.byref(st2), ctypes.byref(rd)) == 0
    assert st2.value == st.value and rd.value
    reader.close()
    with pytest.raises(DDStoreError, match="closed"):
        unwrap(reader, ctypes.byref(st2), ctypes.byref(rd))
    with pytest.raises(TypeError, match="PyDDStore"):
        unwrap(object(), ctypes.byref(st2), ctypes.byref(rd))
    # raise_error sets the documented exception
    RAISE = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_int)
    with pytest.raises(IndexError):
        RAISE(api.raise_error)(-34)
    STRERR = ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.c_int)
    assert STRERR(api.strerror)(-2)


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
