"""Ragged variables through PyDDStore (issue 11): add_ragged, init_ragged,
update_ragged, sizes, get_ragged, readers, and each bad input.

Every rank computes the same reference from the global sample number, so a
rank checks every byte it read without talking to the others.  Sample lengths
include 0; rank 1 (when there is one) holds no sample.  Each test runs for
method 0 and, where libfabric is built, method 1.
"""
import os
import threading

import numpy as np
import pytest

import pyddstore
from _util import DTYPE_IDS, DTYPES, outcome, ticks_during_reads, values

pytestmark = pytest.mark.skipif(not pyddstore.HAVE_MPI,
                                reason="these tests run over MPI (HAVE_MPI False)")


def _methods():
    ms = [0]
    if pyddstore.HAVE_OFI:
        ms.append(1)
    return ms


@pytest.fixture(params=_methods(), ids=lambda m: f"method{m}")
def rstore(request):
    s = pyddstore.PyDDStore(None, method=request.param)
    yield s
    s.free()


# ------------------------------------------------------------ reference ---
def nsamples(rank):
    """Samples of `rank`: 5, 0, 7, 3, 5, 0, ... (rank 1 holds none)."""
    return [5, 0, 7, 3][rank % 4]


def sample_offsets(size):
    off = [0]
    for r in range(size):
        off.append(off[-1] + nsamples(r))
    return off


def length(g):
    """Element rows of global sample g: 0..5, zeros included."""
    return (7 * int(g) + 3) % 6


def sample(dtype, g, trailing=()):
    """Reference payload of sample g: (length(g), *trailing), exact."""
    n = length(g)
    disp = int(np.prod(trailing)) if trailing else 1
    # element rows of sample g are numbered g*8 + e (< 8 per sample)
    v = values(dtype, np.arange(n) + 8 * int(g), disp)
    return v.reshape((n,) + tuple(trailing))


def packed(dtype, idx, trailing=()):
    disp = int(np.prod(trailing)) if trailing else 1
    parts = [sample(dtype, g, trailing).reshape(-1, disp) for g in idx]
    return np.concatenate(parts) if parts else np.zeros((0, disp), dtype)


def local_payload(store, dtype, trailing=()):
    """This rank's (values, lengths) for add_ragged."""
    off = sample_offsets(store.size)
    gs = range(off[store.rank], off[store.rank + 1])
    lens = np.array([length(g) for g in gs], np.int64)
    parts = [sample(dtype, g, trailing) for g in gs]
    vals = (np.concatenate(parts) if parts
            else np.zeros((0,) + tuple(trailing), dtype))
    return np.ascontiguousarray(vals), lens


def add_ragged(store, name, dtype, trailing=()):
    vals, lens = local_payload(store, dtype, trailing)
    store.add_ragged(name, vals, lens)
    vals[...] = 0          # the store copied it
    return sample_offsets(store.size)


def _world():
    from mpi4py import MPI
    return MPI.COMM_WORLD


def _all(ok):
    """Collective: True on every rank iff `ok` on every rank."""
    return _world().allreduce(bool(ok), op=__import__("mpi4py").MPI.LAND)


# ---------------------------------------------------------------- reads ---
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("trailing", [(), (2, 3)], ids=["1d", "3d"])
def test_every_byte_against_the_reference(rstore, dtype, trailing):
    s = rstore
    off = add_ragged(s, "r", dtype, trailing)
    total = off[-1]
    disp = int(np.prod(trailing)) if trailing else 1
    all_lens = np.array([length(g) for g in range(total)], np.int64)
    isz = np.dtype(dtype).itemsize
    assert s.info("r") == (total, disp, isz)
    full = s.info_full("r")
    lo, hi = off[s.rank], off[s.rank + 1]
    assert full["ragged"] is True
    assert full["total_rows"] == total
    assert full["local_rows"] == hi - lo and full["local_first"] == lo
    assert full["total_elems"] == int(all_lens.sum())
    assert full["local_elems"] == int(all_lens[lo:hi].sum())
    assert full["row_bytes"] == disp * isz
    assert s.offsets("r") == tuple(off)
    np.testing.assert_array_equal(s.sizes("r", np.arange(total)), all_lens)

    rng = np.random.default_rng(11 + s.rank)
    batches = [np.arange(total), rng.integers(0, total, 40),
               np.array([total - 1, 0, total - 1, 0]),      # repeats, owners
               np.array([off[-2] - 1 if off[-2] else 0, total - 1] * 3)]
    for idx in batches:
        ref = packed(dtype, idx, trailing)
        vals, lens = s.get_ragged("r", idx)
        assert lens.dtype == np.int64 and lens.shape == (len(idx),)
        np.testing.assert_array_equal(lens, all_lens[idx])
        assert vals.dtype == np.dtype(dtype) and vals.shape == (len(ref), disp)
        assert vals.tobytes() == ref.tobytes()           # bit-exact
        np.testing.assert_array_equal(s.sizes("r", idx), all_lens[idx])
        # out=: exact, then larger (rows after the total untouched)
        for extra in (0, 5):
            out = np.full((len(ref) + extra, disp), 7, dtype)
            v2, l2 = s.get_ragged("r", idx, out=out)
            assert v2.shape == ref.shape and np.shares_memory(v2, out)
            assert v2.tobytes() == ref.tobytes()
            np.testing.assert_array_equal(l2, all_lens[idx])
            assert (out[len(ref):] == np.full((extra, disp), 7, dtype)).all()
        # indices as a list, int32 and uint16 arrays
        for conv in (list, lambda a: np.asarray(a, np.int32),
                     lambda a: np.asarray(a, np.uint16)):
            v3, l3 = s.get_ragged("r", conv([int(i) for i in idx]))
            assert v3.tobytes() == ref.tobytes()


def test_empty_batch_and_empty_samples(rstore):
    s = rstore
    off = add_ragged(s, "r", np.float32, (4,))
    vals, lens = s.get_ragged("r", [])
    assert vals.shape == (0, 4) and vals.dtype == np.float32
    assert lens.shape == (0,) and lens.dtype == np.int64
    assert s.sizes("r", []).shape == (0,)
    out = np.full((2, 4), 3.0, np.float32)
    v, l = s.get_ragged("r", np.zeros(0, np.int64), out=out)
    assert v.shape == (0, 4) and (out == 3.0).all()
    # only zero-length samples: no payload, lengths 0
    zeros = [g for g in range(off[-1]) if length(g) == 0]
    assert zeros
    vals, lens = s.get_ragged("r", zeros * 2)
    assert vals.shape == (0, 4) and (lens == 0).all() and len(lens) == 2 * len(zeros)


def test_out_too_small_reads_nothing(rstore):
    s = rstore
    off = add_ragged(s, "r", np.int64, (2,))
    idx = np.arange(off[-1])
    need = sum(length(g) for g in idx)
    out = np.full((need - 1, 2), -9, np.int64)
    with pytest.raises(ValueError, match=f"need {need} rows"):
        s.get_ragged("r", idx, out=out)
    assert (out == -9).all()
    # wrong row width, wrong dtype, read-only
    with pytest.raises(ValueError, match="bytes per row"):
        s.get_ragged("r", idx, out=np.zeros((need, 3), np.int64))
    with pytest.raises(TypeError):
        s.get_ragged("r", idx, out=np.zeros((need, 2), np.float64))
    ro = np.zeros((need, 2), np.int64)
    ro.setflags(write=False)
    with pytest.raises(ValueError, match="writable"):
        s.get_ragged("r", idx, out=ro)
    # out-of-range and negative indices name the position
    with pytest.raises(IndexError):
        s.get_ragged("r", [0, off[-1]])
    with pytest.raises(IndexError):
        s.sizes("r", [-1])
    with pytest.raises(TypeError, match="float"):
        s.sizes("r", [1.0])
    # usable after
    v, l = s.get_ragged("r", idx, out=np.zeros((need, 2), np.int64))
    assert v.tobytes() == packed(np.int64, idx, (2,)).tobytes()


def test_raw_records(rstore):
    s = rstore
    rec = np.dtype([("a", np.int32), ("b", np.float64)])
    off = sample_offsets(s.size)
    gs = range(off[s.rank], off[s.rank + 1])
    lens = np.array([length(g) for g in gs], np.int64)
    vals = np.zeros(int(lens.sum()), rec)
    vals["a"] = np.arange(len(vals)) + 1000 * s.rank
    vals["b"] = vals["a"] * 0.5
    s.add_ragged("raw", vals, lens)
    assert s.info_full("raw")["dtype"] == "raw"
    vals_all = []
    for r in range(s.size):
        n = sum(length(g) for g in range(off[r], off[r + 1]))
        v = np.zeros(n, rec)
        v["a"] = np.arange(n) + 1000 * r
        v["b"] = v["a"] * 0.5
        vals_all.append(v)
    ref = np.concatenate(vals_all)
    starts = np.concatenate([[0], np.cumsum([length(g) for g in range(off[-1])])])
    idx = [off[-1] - 1, 0, off[-1] // 2]
    exp = np.concatenate([ref[starts[g]:starts[g + 1]] for g in idx])
    got, lens = s.get_ragged("raw", idx)
    assert got.dtype == np.uint8 and got.shape == (len(exp), rec.itemsize)
    assert got.tobytes() == exp.tobytes()
    out = np.zeros(len(exp) + 1, rec)
    v, _ = s.get_ragged("raw", idx, out=out)
    assert v.tobytes() == exp.tobytes()


def test_bfloat16_through_torch(rstore):
    torch = pytest.importorskip("torch", reason="bfloat16 arrays come from torch")
    s = rstore
    vals, lens = local_payload(s, np.float16, (3,))
    bits = torch.from_numpy(vals.view(np.int16).copy())
    s.add_ragged("bf", bits.view(torch.bfloat16), torch.from_numpy(lens))
    assert s.info_full("bf")["dtype"] == "bfloat16"
    total = sample_offsets(s.size)[-1]
    idx = np.random.default_rng(s.rank).integers(0, total, 20)
    ref = packed(np.float16, idx, (3,)).view(np.int16)
    out = torch.zeros((len(ref) + 2, 3), dtype=torch.bfloat16)
    v, l = s.get_ragged("bf", idx, out=out)
    assert isinstance(v, torch.Tensor) and tuple(v.shape) == ref.shape
    assert (v.view(torch.int16).numpy() == ref).all()
    np.testing.assert_array_equal(l, [length(g) for g in idx])
    with pytest.raises(TypeError, match="bfloat16.*out="):
        s.get_ragged("bf", idx)


# ----------------------------------------------- fixed vs ragged ---------
def test_fixed_calls_on_ragged_and_ragged_calls_on_fixed(rstore):
    s = rstore
    off = add_ragged(s, "r", np.float64, (2,))
    s.add("f", np.zeros((3, 2)))
    buf = np.zeros((4, 2))
    for call, kind in ((lambda: s.get("r", buf, 0), "ragged"),
                       (lambda: s.get_batch("r", buf, [0, 0, 0, 0]), "ragged"),
                       (lambda: s.update("r", buf[:1], 0), "ragged"),
                       (lambda: s.get_ragged("f", [0]), "fixed"),
                       (lambda: s.get_ragged("f", [0], out=buf), "fixed"),
                       (lambda: s.sizes("f", [0]), "fixed"),
                       (lambda: s.update_ragged("f", buf[:1], 0, 1), "fixed")):
        with pytest.raises(ValueError, match=kind):
            call()
    # both still work
    v, l = s.get_ragged("r", [off[-1] - 1])
    assert v.tobytes() == packed(np.float64, [off[-1] - 1], (2,)).tobytes()
    s.get("f", buf[:3], 0)
    assert (buf[:3] == 0).all()


# ------------------------------------------------------ collective errors ---
def _bad_add(s, name, **kw):
    """Collective: add_ragged where only the rank `kw['rank']` passes bad
    input; returns the exception every rank got."""
    dtype = kw.get("dtype", np.float32)
    vals, lens = local_payload(s, np.float32, kw.get("trailing", (2,)))
    vals = vals.astype(dtype)
    if s.rank == kw.get("rank", 0):
        if "lens" in kw:
            lens = kw["lens"](lens)
        if "vals" in kw:
            vals = kw["vals"](vals)
    return outcome(lambda: s.add_ragged(name, vals, lens))


def _check_usable(s):
    off = add_ragged(s, "ok", np.int32, (2,))
    idx = np.arange(off[-1])
    v, _ = s.get_ragged("ok", idx)
    good = v.tobytes() == packed(np.int32, idx, (2,)).tobytes()
    s.free()
    return good


@pytest.mark.parametrize("case", [
    "sum_short", "sum_long", "negative", "overflow", "two_d_lengths", "scalar_lengths",
    "float_lengths", "dtype_differs", "trailing_differs", "uint64_huge", "list_huge"])
def test_bad_add_fails_every_rank_and_store_stays_usable(rstore, case):
    s = rstore
    last = s.size - 1
    kws = {
        "sum_short": dict(rank=last, lens=lambda l: np.append(l, 1)),
        "sum_long": dict(rank=0, vals=lambda v: np.concatenate([v, v[:1]])),
        "negative": dict(rank=0, lens=lambda l: np.concatenate([[-1, 1 + length(0)], l[1:]])),
        "overflow": dict(rank=last, lens=lambda l: np.append(l, [2**62] * 4)),
        "two_d_lengths": dict(rank=last, lens=lambda l: l.reshape(1, -1)),
        "scalar_lengths": dict(rank=0, lens=lambda l: np.int64(len(l))),
        "float_lengths": dict(rank=0, lens=lambda l: [float(x) for x in l] or [0.5]),
        # above INT64_MAX: a bad length (ValueError), not an IndexError
        "uint64_huge": dict(rank=last, lens=lambda l: np.append(l.astype(np.uint64),
                                                                np.uint64(2**63))),
        "list_huge": dict(rank=0, lens=lambda l: [int(x) for x in l] + [2**64 - 1]),
        "dtype_differs": dict(rank=last, dtype=np.float64 if s.rank == last else np.float32),
        "trailing_differs": dict(rank=last, vals=lambda v: np.ascontiguousarray(
            np.concatenate([v, v], axis=1))),
    }[case]
    if case == "dtype_differs" and s.size == 1:
        pytest.skip("SKIP: a dtype differing across ranks needs 2 ranks")
    if case == "trailing_differs" and s.size == 1:
        pytest.skip("SKIP: trailing dims differing across ranks need 2 ranks")
    e = _bad_add(s, "bad", **kws)
    exc = TypeError if case == "float_lengths" else ValueError
    assert isinstance(e, exc), (case, repr(e))
    words = {"sum_short": "sum|lengths", "sum_long": "sum|lengths",
             "negative": "-1|negative", "overflow": "INT64|int64|overflow",
             "two_d_lengths": "lengths.*1-D",
             "scalar_lengths": "lengths.*1-D", "float_lengths": "lengths",
             "dtype_differs": "dtype|itemsize|float",
             "uint64_huge": "lengths.*out of range", "list_huge": "lengths.*out of range",
             "trailing_differs": "disp|trailing|row"}[case]
    import re
    assert re.search(words, str(e)), (case, str(e))
    assert "bad" not in s.names()
    assert _check_usable(s)


# ------------------------------------------------------- init / update ---
def test_init_ragged_then_update_ragged_and_epoch(rstore):
    s = rstore
    off = sample_offsets(s.size)
    lo, hi = off[s.rank], off[s.rank + 1]
    lens = [length(g) for g in range(lo, hi)]
    s.init_ragged("u", lens, 3, dtype="int32")
    assert s.info("u") == (off[-1], 3, 4)
    assert s.info_full("u")["ragged"] is True
    idx = np.arange(off[-1])
    v, l = s.get_ragged("u", idx)
    zeroed = v.dtype == np.int32 and (v == 0).all()
    s.epoch_end()            # every rank's reads of the zeros are done
    assert zeroed
    # fill local samples in two updates: [0, k) and [k, n)
    vals, _ = local_payload(s, np.int32, (3,))
    k = (hi - lo) // 2
    ek = sum(lens[:k])
    s.update_ragged("u", vals[:ek], 0, k)
    s.update_ragged("u", vals[ek:], k, hi - lo - k)
    s.epoch_begin()
    v, l = s.get_ragged("u", idx)
    assert v.tobytes() == packed(np.int32, idx, (3,)).tobytes()
    np.testing.assert_array_equal(l, [length(g) for g in idx])
    s.epoch_end()
    # update_ragged with the wrong number of element rows, out of range
    if hi > lo:
        with pytest.raises(ValueError):
            s.update_ragged("u", vals[:ek + 1], 0, k)
    with pytest.raises(IndexError):     # a range outside the rank's samples
        s.update_ragged("u", vals[:0], hi - lo + 1, 1)
    with pytest.raises(TypeError):
        s.update_ragged("u", vals.astype(np.float32), 0, hi - lo)
    # update again (new values), visible after epoch_begin
    s.update_ragged("u", vals + 1, 0, hi - lo)
    s.epoch_begin()
    v, _ = s.get_ragged("u", idx)
    assert v.tobytes() == (packed(np.int32, idx, (3,)) + 1).tobytes()
    s.epoch_end()


def test_init_ragged_bad_input(rstore):
    s = rstore
    lens = [2, 0, 1] if s.rank == 0 else []
    e = outcome(lambda: s.init_ragged("i", lens, 0))
    assert isinstance(e, ValueError) and "disp" in str(e)
    e = outcome(lambda: s.init_ragged("i", [[1, 2]] if s.rank == 0 else [], 2))
    assert isinstance(e, (TypeError, ValueError)) and "lengths" in str(e)
    e = outcome(lambda: s.init_ragged("i", [-3] if s.rank == 0 else [], 2))
    assert isinstance(e, ValueError)
    s.init_ragged("i", lens, 2, dtype=np.float64)
    v, l = s.get_ragged("i", np.arange(s.info("i")[0]))
    assert v.shape == (3 * (s.size > 0), 2) and (v == 0).all()


# -------------------------------------------------------------- readers ---
def test_open_reader_threads(rstore):
    s = rstore
    off = add_ragged(s, "r", np.float64, (5,))
    total = off[-1]
    errors = []

    def work(t):
        try:
            with s.open_reader() as rd:
                rng = np.random.default_rng(100 * t + s.rank)
                for _ in range(20):
                    idx = rng.integers(0, total, 16)
                    v, l = rd.get_ragged("r", idx)
                    assert v.tobytes() == packed(np.float64, idx, (5,)).tobytes()
                    assert (rd.sizes("r", idx) == l).all()
                    out = np.empty((len(v), 5))
                    v2, _ = rd.get_ragged("r", idx, out=out)
                    assert v2.tobytes() == v.tobytes()
        except BaseException as e:  # noqa: BLE001
            errors.append(repr(e))

    ts = [threading.Thread(target=work, args=(t,)) for t in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors


def test_fork_reader_in_a_forked_child(rstore):
    s = rstore
    off = add_ragged(s, "r", np.int64, (2,))
    total = off[-1]
    idx = np.arange(total)[::-1].copy()
    _world().Barrier()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: never returns to pytest
        os.close(r)
        msg = "ok"
        try:
            rd = s.fork_reader()
            v, l = rd.get_ragged("r", idx)
            if v.tobytes() != packed(np.int64, idx, (2,)).tobytes():
                msg = "wrong payload"
            elif list(rd.sizes("r", idx)) != [length(g) for g in idx]:
                msg = "wrong sizes"
            rd.close()
        except BaseException as e:  # noqa: BLE001
            msg = repr(e)
        os.write(w, msg.encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        report = f.read()
    os.waitpid(pid, 0)
    _world().Barrier()
    assert report == "ok", report


def test_python_runs_while_a_ragged_read_is_in_flight(rstore):
    """get_ragged releases the GIL like get_batch: while one thread reads
    (32 MiB per call), the main thread keeps running Python code inside the
    reads' C-side windows."""
    from pyddstore import _core
    s = rstore
    cols = 16384                                  # 64 KiB element rows
    lens = np.full(8, 16, np.int64)               # 1 MiB samples
    vals = np.empty((int(lens.sum()), cols), np.float32)
    vals[:] = np.arange(len(vals), dtype=np.float32)[:, None] + 1000 * s.rank
    s.add_ragged("big", vals, lens)
    total = 8 * s.size
    idx = np.arange(32) % total
    out = np.empty((32 * 16, cols), np.float32)
    win = []

    def reader():
        for _ in range(10):
            s.get_ragged("big", idx, out=out)
            win.append(_core._last_read_window())
        return win

    inside = ticks_during_reads(reader)
    ref = np.concatenate([np.arange(16 * (g % 8), 16 * (g % 8) + 16) + 1000 * (g // 8)
                          for g in idx]).astype(np.float32)
    assert (out[:, 0] == ref).all() and (out[:, -1] == ref).all()
    assert len(win) == 10
    assert inside > 0, "the main thread never ran during a ragged read"


# ------------------------------------------------------------- C API ----
def test_c_ragged_sizes_through_the_handle(rstore):
    """libddstore.so's dds_store_ragged_sizes on the store behind a
    PyDDStore's handle: the functions the torch extension calls directly."""
    import ctypes
    from test_core_comm import _libddstore
    s = rstore
    add_ragged(s, "r", np.int32, (1,))
    lib = _libddstore()
    pin, st, rd = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    assert lib.ddstore_handle_enter(s._handle, ctypes.byref(pin), ctypes.byref(st),
                                    ctypes.byref(rd)) == 0
    try:
        lib.dds_store_ragged_sizes.argtypes = [
            ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p,
            ctypes.POINTER(ctypes.c_int64), ctypes.c_size_t, ctypes.POINTER(ctypes.c_int64)]
        total = sample_offsets(s.size)[-1]
        rows = (ctypes.c_int64 * total)(*range(total))
        lens = (ctypes.c_int64 * total)()
        assert lib.dds_store_ragged_sizes(st, None, b"r", rows, total, lens) == 0
    finally:
        lib.ddstore_handle_leave(pin)
    assert list(lens) == [length(g) for g in range(total)]
