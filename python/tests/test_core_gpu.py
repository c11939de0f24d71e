"""pyddstore.PyDDStore with GPU arrays (``__cuda_array_interface__``), no torch.

Two kinds of tests:

- Parsing and the "no GPU" error: fake objects exposing
  ``__cuda_array_interface__`` (what torch CUDA tensors and cupy arrays
  expose).  Without a usable GPU every GPU entry point raises DDStoreError
  naming the requirement ("no GPU"), never crashes, and the store stays
  usable.  Malformed interfaces raise TypeError / ValueError first.
- End to end through the store (method 0, MPI RMA: a transport without
  FI_HMEM, so reads into GPU memory are staged): with ddstore-gpu's host
  emulation of one CUDA device (none build only, ``_core._gpu_emulation``),
  device memory comes from ``_core._gpu_alloc`` and copies are deferred
  until the stream is synchronised, so the tests see both the data and the
  absence of host waits.  On a real GPU the same behaviour is checked with
  torch by ci/gpu-check.d/store-get-cuda.sh.
"""
import gc
import os
import weakref

import numpy as np
import pytest

import pyddstore
from pyddstore import _core
from _util import add_var, half_bits, layout, values

GPU = _core._gpu_info()
EMULATION = _core.GPU_BACKEND == "none"
# The emulation and _core._gpu_alloc & co. are test hooks: compiled only with
# DDSTORE_TEST_HOOKS (the Bazel dev build; not --config=release or the pip
# build unless DDSTORE_TEST_HOOKS=1).
TEST_HOOKS = hasattr(_core, "_gpu_emulation")


class FakeCudaArray:
    """An object exposing __cuda_array_interface__ over a given pointer."""

    def __init__(self, shape, typestr="<f8", ptr=0x10000, strides=None, version=2,
                 readonly=False, **extra):
        self.iface = dict(shape=tuple(shape), typestr=typestr, data=(ptr, readonly),
                          version=version, strides=strides, **extra)

    @property
    def __cuda_array_interface__(self):
        return self.iface


class DevArray(FakeCudaArray):
    """Emulated device memory (``_core._gpu_alloc``) with the interface."""

    def __init__(self, shape, dtype=np.float64, stream=None, version=3):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.nbytes = int(np.prod(self.shape)) * self.dtype.itemsize
        self.ptr = _core._gpu_alloc(max(self.nbytes, 1))
        self.stream = stream
        extra = {"stream": stream} if version >= 3 else {}
        super().__init__(self.shape, self.dtype.str, self.ptr, None, version, **extra)

    def fill(self, byte):
        _core._gpu_memset(self.ptr, byte, self.nbytes, self.stream)
        _core._gpu_stream_synchronize(self.stream)

    def write(self, arr):
        _core._gpu_write(self.ptr, np.ascontiguousarray(arr, self.dtype).tobytes(),
                         self.stream)

    def host(self):
        """Contents after the work queued on the stream (a stream sync)."""
        raw = _core._gpu_read(self.ptr, self.nbytes, self.stream)
        return np.frombuffer(raw, self.dtype).reshape(self.shape).copy()

    def peek(self):
        """Contents now, without waiting for anything (emulation only)."""
        raw = _core._gpu_peek(self.ptr, self.nbytes)
        return np.frombuffer(raw, self.dtype).reshape(self.shape).copy()

    def free(self):
        if self.ptr:
            _core._gpu_free(self.ptr)
            self.ptr = 0


def usable(store, name="v", disp=3):
    total = store.info(name)[0]
    out = np.zeros((total, disp))
    store.get(name, out)
    np.testing.assert_array_equal(out, values(np.float64, range(total), disp))


@pytest.fixture
def v(store):
    add_var(store, "v", np.float64, 3)
    return store


# ---- parsing and "no GPU" ----------------------------------------------------

def test_backend_is_reported():
    assert _core.GPU_BACKEND in ("none", "cuda", "hip")
    assert GPU["backend"] == _core.GPU_BACKEND
    assert isinstance(GPU["available"], bool)


@pytest.mark.parametrize("iface,exc,match", [
    (dict(typestr="<u2"), TypeError, "uint16"),
    (dict(typestr="<i2"), TypeError, "int16"),
    (dict(typestr="<c8"), TypeError, "complex"),
    (dict(typestr="<V4"), TypeError, "<V4"),           # only '<V2' (bfloat16) has an order
    (dict(typestr=">f8"), TypeError, "byte order"),
    (dict(typestr="xx"), TypeError, "typestr"),
    (dict(shape=()), ValueError, "0-D"),
    (dict(strides=(8, 32)), ValueError, "C-contiguous"),
    (dict(mask=object()), ValueError, "mask"),
    (dict(data=0x10000), TypeError, "data"),
    (dict(shape=[4, 3]), TypeError, "shape"),
    (dict(version="2"), TypeError, "version"),
    (dict(version=3, stream=0), ValueError, "stream"),
    (dict(version=3, stream="s"), TypeError, "stream"),
])
def test_malformed_interfaces(v, iface, exc, match):
    f = FakeCudaArray((4, 3))
    f.iface.update(iface)
    with pytest.raises(exc, match=match):
        v.get("v", f, 0)
    usable(v)


@pytest.mark.parametrize("key", ["shape", "typestr", "data", "version"])
def test_missing_interface_keys(v, key):
    f = FakeCudaArray((4, 3))
    del f.iface[key]
    with pytest.raises(TypeError, match=key):
        v.get_batch("v", f, [0, 1, 2, 3])
    usable(v)


def test_read_only_destination_and_attribute_errors(v):
    with pytest.raises(ValueError, match="read-only"):
        v.get("v", FakeCudaArray((2, 3), readonly=True), 0)

    class Raising:
        @property
        def __cuda_array_interface__(self):
            raise RuntimeError("Can't get __cuda_array_interface__ on Variable "
                               "that requires grad")

    with pytest.raises(TypeError, match="requires grad"):
        v.get("v", Raising(), 0)

    class NotADict:
        __cuda_array_interface__ = [1, 2]

    with pytest.raises(TypeError, match="not a dict"):
        v.get("v", NotADict(), 0)
    with pytest.raises(TypeError, match="buffer protocol"):  # no interface at all
        v.get("v", object(), 0)
    usable(v)


@pytest.mark.skipif(GPU["available"], reason="a GPU is usable here: the 'no GPU' "
                    "error cannot happen (ci/gpu-check.d covers the GPU)")
def test_no_gpu_is_a_clear_error_everywhere(v):
    """Without a usable GPU, a well-formed GPU array is DDStoreError naming
    the requirement on every entry point, and nothing crashes."""
    good = [FakeCudaArray((4, 3)), FakeCudaArray((4, 3), version=3, stream=1),
            FakeCudaArray((4, 3), typestr="|V24"), FakeCudaArray((4,), "<f8")]
    for f in good:
        with pytest.raises(pyddstore.DDStoreError, match="no GPU"):
            v.get("v", f, 0)
        with pytest.raises(pyddstore.DDStoreError, match="no GPU"):
            v.get_batch("v", f, np.arange(f.iface["shape"][0]))
        with pytest.raises(pyddstore.DDStoreError, match="no GPU"):
            v.register_recv("v", f)
        with pytest.raises(pyddstore.DDStoreError, match="no GPU"):
            v.update("v", f, 0)
    # collective: fails on every rank alike, no hang
    with pytest.raises(pyddstore.DDStoreError, match="no GPU"):
        v.add("g", FakeCudaArray((2, 3)))
    with pytest.raises(pyddstore.DDStoreError, match="no GPU"):
        v.add("g", FakeCudaArray((2, 3)) if v.rank == 0 else np.zeros((2, 3)))
    assert "g" not in v.names()
    usable(v)
    v.add("g", np.zeros((2, 3)))   # the name is still free


# ---- end to end with the host emulation of one device ---------------------------

class Emu:
    def __init__(self):
        self.store = pyddstore.PyDDStore(None, method=0)
        self.streams, self.arrays = [], []

    def __iter__(self):
        return iter((self.store, self.streams, self.arrays))

    def stream(self):
        st = _core._gpu_stream_create()
        self.streams.append(st)
        return st


@pytest.fixture
def emu():
    """A fresh method-0 store created with ddstore-gpu's host emulation on
    (a transport without FI_HMEM: reads into device memory are staged)."""
    if not EMULATION:
        pytest.skip("the host emulation exists in the none build only "
                    f"(this _core has the {_core.GPU_BACKEND} backend)")
    if not TEST_HOOKS:
        pytest.skip("this _core was built without test hooks (DDSTORE_TEST_HOOKS: "
                    "a release or pip build): no host emulation")
    if not pyddstore.HAVE_MPI:
        pytest.skip("method 0 needs MPI and this build has none")
    _core._gpu_emulation(True)
    e = Emu()
    yield e
    e.store.free()
    for a in e.arrays:
        a.free()
    for st in e.streams:
        _core._gpu_stream_destroy(st)
    # the C store (and its pinned staging pool) goes before the emulation
    e.store = None
    gc.collect()
    _core._gpu_emulation(False)


def test_emulated_device_is_reported(emu):
    info = _core._gpu_info()
    assert info["available"] and info["emulated"] and info["device_count"] == 1


@pytest.mark.parametrize("version", [2, 3])
def test_staged_reads_into_device_memory(emu, version):
    s, streams, arrays = emu
    off = add_var(s, "v", np.float32, 5)
    total = off[-1]
    st = _core._gpu_stream_create()
    streams.append(st)
    rng = np.random.default_rng(11 + s.rank)
    idx = rng.integers(0, total, 2 * total)
    idx[-1] = idx[0]                                   # a repeat
    d = DevArray((len(idx), 5), np.float32, stream=st if version >= 3 else None,
                 version=version)
    arrays.append(d)
    for _ in range(3):
        d.fill(0xAB)
        s.get_batch("v", d, idx)
        if version >= 3:
            # queued on the caller's stream, nobody waited: not there yet
            assert (d.peek().view(np.uint8) == 0xAB).all()
        np.testing.assert_array_equal(d.host(), values(np.float32, idx, 5))
    r = DevArray((total - 1, 5), np.float32, stream=st)
    arrays.append(r)
    r.fill(0xAB)
    s.get("v", r, 1)                                   # across every owner
    np.testing.assert_array_equal(r.host(), values(np.float32, range(1, total), 5))
    p = s.get_profile("v")
    assert p["calls"] == 4
    assert p["staged_bytes"] >= p["bytes"]             # every byte was staged
    assert p["gpu_sync_ns"] > 0


def test_stream_order_after_queued_work(emu):
    """A read is ordered after the work already queued on the stream (here
    a memset standing in for a kernel) without the host waiting for it."""
    s, streams, arrays = emu
    off = add_var(s, "v", np.int64, 2)
    total = off[-1]
    st = _core._gpu_stream_create()
    streams.append(st)
    d = DevArray((total, 2), np.int64, stream=st)
    arrays.append(d)
    d.fill(0)
    _core._gpu_memset(d.ptr, 0xCD, d.nbytes, st)       # queued "kernel"
    s.get("v", d, 0)
    assert (d.peek() == 0).all()                        # neither ran yet
    np.testing.assert_array_equal(d.host(), values(np.int64, range(total), 2))


def test_half_floats_in_device_memory(emu):
    """float16 ('<f2') and bfloat16 ('<V2', torch's typestr) GPU arrays: add,
    update, get, get_batch bit-exact (NaN payloads, -0.0)."""
    s, streams, arrays = emu
    st = emu.stream()
    off = layout(s.size)
    lo, hi = off[s.rank], off[s.rank + 1]
    total = off[-1]
    add_var(s, "h", np.float16, 3)
    d = DevArray((total, 3), np.float16, stream=st)
    arrays.append(d)
    d.fill(0xAB)
    s.get("h", d, 0)
    got_h = d.host()
    # bfloat16: no numpy dtype; the bits travel as uint16 under typestr '<V2'
    s.init("b", hi - lo, 3, dtype="bfloat16")
    src = DevArray((hi - lo, 3), np.uint16, stream=st)
    src.iface["typestr"] = "<V2"
    arrays.append(src)
    src.write(half_bits(np.arange(lo, hi)[:, None] * 7 + np.arange(3),
                        special=(np.arange(lo, hi)[:, None] + np.arange(3)) % 2 == 0))
    s.update("b", src, 0)
    s.init("_sync", 0, 1)                              # every rank has updated
    idx = np.array([total - 1, 0, total - 1, 1])
    out = DevArray((len(idx), 3), np.uint16, stream=st)
    out.iface["typestr"] = "<V2"
    arrays.append(out)
    out.fill(0xAB)
    s.get_batch("b", out, idx)
    got_b = out.host()
    want_b = half_bits(idx[:, None] * 7 + np.arange(3),
                       special=(idx[:, None] + np.arange(3)) % 2 == 0)
    assert got_h.tobytes() == values(np.float16, range(total), 3).tobytes()
    assert s.info_full("b")["dtype"] == "bfloat16"
    assert got_b.tobytes() == want_b.tobytes()
    with pytest.raises(TypeError, match="holds bfloat16"):
        s.get("b", d, 0)                               # float16 into bfloat16: no


def test_register_recv_device_buffer(emu):
    s, streams, arrays = emu
    off = add_var(s, "v", np.float64, 3)
    st = _core._gpu_stream_create()
    streams.append(st)
    d = DevArray((off[-1], 3), stream=st)
    arrays.append(d)
    s.register_recv("v", d)
    s.register_recv("v", d)          # again: a no-op, as in the original
    s.get("v", d, 0)
    np.testing.assert_array_equal(d.host(), values(np.float64, range(off[-1]), 3))
    s.unregister_recv("v", d)
    with pytest.raises(ValueError, match="not registered"):
        s.unregister_recv("v", d)


class Agreed:
    """Checks made between collective calls, agreed on by every rank.

    ``with chk("what"): ...`` records the first exception of its block
    instead of raising it, so that every rank still makes every collective
    call; ``chk.agree(stage)`` (collective) then fails the test on every rank
    alike if a check failed on any: the failing rank re-raises its own
    exception (full traceback), the others fail naming it.  A plain assert
    failing on one rank would leave the others waiting in the next
    collective call (and, under ``pytest -x``, in the next test's)."""

    def __init__(self, comm):
        self.comm, self.what, self.first = comm, None, None

    def __call__(self, what):
        self.what = what
        return self

    def __enter__(self):
        return self

    def __exit__(self, et, e, tb):
        if not isinstance(e, Exception):
            return False
        if self.first is None:
            self.first = (self.what, e)
        return True

    def agree(self, stage):
        mine = None if self.first is None else \
            f"{self.first[0]}: {type(self.first[1]).__name__}: {self.first[1]}"
        every = self.comm.allgather(mine)
        if self.first is not None:
            raise self.first[1]
        bad = [f"rank {r}: {m}" for r, m in enumerate(every) if m is not None]
        if bad:
            pytest.fail(f"{stage}: a check failed on another rank: " + " | ".join(bad),
                        pytrace=False)


def test_gpu_shard_readable_by_every_rank_and_kept_alive(emu):
    MPI = pytest.importorskip("mpi4py.MPI", reason="the ranks agree on the "
                              "outcome of each stage through mpi4py")
    s, streams, arrays = emu
    chk = Agreed(MPI.COMM_WORLD)
    disp, rank, size = 4, s.rank, s.size
    rows = [3 + (r % 2) for r in range(size)]
    off = np.concatenate([[0], np.cumsum(rows)]).tolist()
    total = off[-1]
    with chk("shard setup"):
        st = _core._gpu_stream_create()
        streams.append(st)
        shard = DevArray((rows[rank], disp), np.float64, stream=st)
        arrays.append(shard)
        shard.write(values(np.float64, range(off[rank], off[rank + 1]), disp))
        alive = weakref.ref(shard)
    chk.agree("setup")
    with chk("add"):
        s.add("g", shard)                               # collective
    with chk("info"):
        info = s.info_full("g")
        assert info["mem"] == "cuda" and info["local_rows"] == rows[rank]
    out = np.zeros((total, disp))
    with chk("read into host memory"):
        s.get("g", out, 0)
        np.testing.assert_array_equal(out, values(np.float64, range(total), disp))
    with chk("read into device memory"):
        d = DevArray((total, disp), stream=st)
        arrays.append(d)
        s.get_batch("g", d, np.arange(total)[::-1])
        np.testing.assert_array_equal(d.host(),
                                      values(np.float64, range(total)[::-1], disp))
    # Every rank has read every shard before any rank overwrites its own rows
    # below: update() is local and unsynchronised, so without this a rank
    # ahead of the others changed rows a slower peer had yet to read (seen at
    # 4 ranks on 2 cores: a peer read [1000+r], [2000+r] for rows off[r] and
    # off[r]+1 instead of the original values).
    chk.agree("reads before the updates")

    # update from host memory and from device memory; every rank sees it
    with chk("update"):
        new = values(np.float64, [1000 + rank], disp)
        s.update("g", new, 0)
        src = DevArray((1, disp), stream=st)
        arrays.append(src)
        src.write(values(np.float64, [2000 + rank], disp))
        s.update("g", src, 1)
        np.testing.assert_array_equal(shard.host()[:2], np.vstack(
            [new, values(np.float64, [2000 + rank], disp)]))
    chk.agree("updates")          # collective: every rank updated before this
    with chk("read the updates"):
        s.get("g", out, 0)
        for r in range(size):
            np.testing.assert_array_equal(out[off[r]],
                                          values(np.float64, [1000 + r], disp)[0])
            np.testing.assert_array_equal(out[off[r] + 1],
                                          values(np.float64, [2000 + r], disp)[0])

    # the store keeps the GPU array alive until free()
    arrays.remove(shard)
    ptr = shard.ptr
    del shard
    gc.collect()
    with chk("kept alive by the store"):
        assert alive() is not None
    with chk("free"):
        s.free()                                        # collective
    gc.collect()
    with chk("released by free()"):
        assert alive() is None
    _core._gpu_free(ptr)
    chk.agree("keep-alive")


def test_failed_gpu_add_keeps_nothing(emu):
    s, streams, arrays = emu
    a = DevArray((2, 3))
    arrays.append(a)
    alive = weakref.ref(a)
    add_var(s, "v", np.float64, 3)
    with pytest.raises(ValueError, match="already exists"):
        s.add("v", a)
    arrays.remove(a)
    ptr = a.ptr
    del a
    gc.collect()
    assert alive() is None        # not kept by the failed add
    _core._gpu_free(ptr)


def test_pageable_pointer_behind_the_interface_is_refused(emu):
    """A pointer the runtime does not know (plain host memory, a bogus
    address) behind __cuda_array_interface__ is an error, not a memcpy."""
    s, _, _ = emu
    add_var(s, "v", np.float64, 3)
    host = np.zeros((2, 3))
    f = FakeCudaArray((2, 3), ptr=host.ctypes.data)
    with pytest.raises(ValueError, match="does not know"):
        s.get("v", f, 0)
    usable(s)


def test_staging_disabled_is_a_clear_error(emu, monkeypatch):
    s, streams, arrays = emu
    monkeypatch.setenv("DDSTORE_GPU_STAGING", "0")
    t = pyddstore.PyDDStore(None, method=0)           # reads it at creation
    try:
        add_var(t, "v", np.float64, 3)
        d = DevArray((2, 3))
        arrays.append(d)
        with pytest.raises(pyddstore.DDStoreError, match="DDSTORE_GPU_STAGING"):
            t.get("v", d, 0)
        with pytest.raises(pyddstore.DDStoreError, match="FI_HMEM"):
            t.get_batch("v", d, [0, 0])
        with pytest.raises(pyddstore.DDStoreError, match="DDSTORE_GPU_STAGING"):
            t.add("g", d)                               # on every rank
        usable(t)
    finally:
        t.free()


def test_bad_staging_bytes_fails_creation(monkeypatch):
    if not pyddstore.HAVE_MPI:
        pytest.skip("method 0 needs MPI")
    monkeypatch.setenv("DDSTORE_GPU_STAGING_BYTES", "-1")
    with pytest.raises(ValueError, match="DDSTORE_GPU_STAGING_BYTES"):
        pyddstore.PyDDStore(None, method=0)
