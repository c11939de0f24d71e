"""The torch extension (pyddstore._ddstore_torch): reads into tensor storage.

Run: tools/ddrun -n 2 -- .venv/bin/python -m pytest -q python/tests/test_torch_ext.py
"""
import threading
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import pyddstore  # noqa: E402
from _torch_util import assert_all, world  # noqa: E402
from pyddstore.torch._ext import ext  # noqa: E402


def _rows(comm, per_rank, disp, dtype=np.float32):
    """This rank's shard: row g holds g*disp + arange(disp) (exact in float32)."""
    r = comm.Get_rank()
    first = sum(per_rank(k) for k in range(r))
    g = np.arange(first, first + per_rank(r), dtype=np.int64).reshape(-1, 1)
    return (g * disp + np.arange(disp)).astype(dtype), first


def _expected(rows, disp, dtype=np.float32):
    g = np.asarray(rows, dtype=np.int64).reshape(-1, 1)
    return (g * disp + np.arange(disp)).astype(dtype)


@pytest.fixture
def st():
    comm = world()
    s = pyddstore.PyDDStore(comm, method=0)
    per = lambda r: 5 + (r * 5) % 4          # 5, 6, 7, 8: uneven shards  # noqa: E731
    shard, _ = _rows(comm, per, 6)
    s.add("v", shard)
    s.add("i64", shard.astype(np.int64).reshape(len(shard), 2, 3))
    total = sum(per(k) for k in range(comm.Get_size()))
    yield s, total, comm
    s.free()


def test_get_batch_into_tensor(st):
    s, total, comm = st
    rng = np.random.default_rng(comm.Get_rank())
    idx = rng.integers(0, total, 40)
    idx[3] = idx[7]                       # a repeat
    out = torch.empty((40, 6), dtype=torch.float32)
    ext.get_batch(s, "v", out, idx.tolist())
    ok1 = np.array_equal(out.numpy(), _expected(idx, 6))
    out3 = torch.empty((40, 2, 3), dtype=torch.int64)     # rows shaped (2, 3)
    ext.get_batch(s, "i64", out3, torch.from_numpy(idx))
    ok2 = np.array_equal(out3.numpy().reshape(40, 6), _expected(idx, 6, np.int64))
    assert_all(comm, ok1 and ok2, "get_batch returned wrong rows")


def test_get_consecutive_across_owners(st):
    s, total, comm = st
    out = torch.empty((total, 6))
    ext.get(s, "v", out, 0)
    part = torch.empty((3, 6))
    ext.get(s, "v", part, total - 3)
    ok = np.array_equal(out.numpy(), _expected(range(total), 6)) and \
        np.array_equal(part.numpy(), _expected(range(total - 3, total), 6))
    assert_all(comm, ok, "get() returned wrong rows")


def test_read_fields_and_collate(st):
    s, total, comm = st
    idx = [total - 1, 0, 2, 2]
    a = torch.empty((6, 6))                 # more rows than indices: first 4 written
    b = torch.empty((4, 2, 3), dtype=torch.int64)
    ext.read_fields(s, ["v", "i64"], [a, b], idx)
    ts = ext.collate(s, [("v", (6,), "float32", False), ("i64", (2, 3), "int64", False)], idx)
    ok = (np.array_equal(a[:4].numpy(), _expected(idx, 6)) and
          torch.equal(ts[0], a[:4]) and torch.equal(ts[1], b) and
          ts[1].shape == (4, 2, 3) and ts[1].dtype == torch.int64)
    assert_all(comm, ok, "read_fields/collate mismatch")


@pytest.mark.parametrize("tdtype", ["float16", "bfloat16"])
def test_half_floats_bit_exact(tdtype):
    """add_tensor, get, get_batch, read_fields and collate with float16 /
    bfloat16 tensors keep every bit (NaN payloads, -0.0, infinities)."""
    from _util import half_bits
    comm = world()
    dt = getattr(torch, tdtype)
    r, n = comm.Get_rank(), comm.Get_size()

    def ref(rows):
        g = np.asarray(rows, dtype=np.int64).reshape(-1, 1)
        k = g * 211 + np.arange(5) * 3
        return torch.from_numpy(half_bits(k, special=(g + np.arange(5)) % 2 == 0)
                                .astype(np.int16)).view(dt)

    s = pyddstore.PyDDStore(comm, method=0)
    try:
        ext.add_tensor(s, "h", ref(range(3 * r, 3 * r + 3)), 0)
        total = 3 * n
        full = torch.empty((total, 5), dtype=dt)
        ext.get(s, "h", full, 0)
        idx = [total - 1, 0, total - 1, 1]
        b = torch.empty((4, 5), dtype=dt)
        ext.get_batch(s, "h", b, idx)
        more = torch.empty((6, 5), dtype=dt)
        ext.read_fields(s, ["h"], [more], idx)
        (col,) = ext.collate(s, [("h", (5,), tdtype, False)], idx)
        bits = lambda t: t.view(torch.int16)  # noqa: E731
        ok = (torch.equal(bits(full), bits(ref(range(total)))) and
              torch.equal(bits(b), bits(ref(idx))) and
              torch.equal(bits(more[:4]), bits(ref(idx))) and
              col.dtype == dt and torch.equal(bits(col), bits(ref(idx))) and
              s.info_full("h")["dtype"] == tdtype)
        err = None
        try:                                 # same size, the other dtype
            ext.get(s, "h", torch.empty((1, 5), dtype=torch.int16), 0)
        except TypeError as e:
            err = e
    finally:
        s.free()
    assert_all(comm, ok, f"{tdtype} rows differ")
    assert_all(comm, err is not None and tdtype in str(err), f"int16 into {tdtype}: {err!r}")


@pytest.mark.parametrize("case", ["dtype", "noncontig", "width", "rows", "zero_d",
                                  "index_range", "index_neg", "index_float", "name",
                                  "device"])
def test_checks_before_reading(st, case):
    s, total, comm = st
    out = torch.full((4, 6), -1.0)
    expect = {"dtype": TypeError, "noncontig": ValueError, "width": ValueError,
              "rows": ValueError, "zero_d": ValueError, "index_range": IndexError,
              "index_neg": IndexError, "index_float": TypeError, "name": KeyError,
              "device": TypeError}[case]
    idx, name, dst = [0, 1, 2, 3], "v", out
    if case == "dtype":
        dst = torch.empty((4, 6), dtype=torch.float64)
    elif case == "noncontig":
        dst = torch.empty((6, 4)).t()
    elif case == "width":
        dst = torch.empty((4, 5))
    elif case == "rows":
        dst = torch.empty((3, 6))
    elif case == "zero_d":
        dst = torch.empty(())
    elif case == "index_range":
        idx = [0, 1, total, 2]
    elif case == "index_neg":
        idx = [0, -1, 1, 2]
    elif case == "index_float":
        idx = [0.0, 1.5, 2.0, 3.0]
    elif case == "name":
        name = "nope"
    elif case == "device":
        dst = torch.empty((4, 6), device="meta")
    with pytest.raises(expect) as ei:
        ext.get_batch(s, name, dst, idx)
    msg = str(ei.value)
    if case in ("dtype", "width", "index_range"):
        assert "'v'" in msg or "v" in msg
    if case == "index_range":
        # all indices are checked before anything is read
        assert torch.equal(out, torch.full((4, 6), -1.0))
    # the store stays usable
    ext.get_batch(s, "v", out, [0, 1, 2, 3])
    assert np.array_equal(out.numpy(), _expected([0, 1, 2, 3], 6))


@pytest.mark.parametrize("idx, exc, msg", [
    ([0, 1.5, 2, 3], TypeError, "indices[1]: expected an integer, got float"),
    ([0, 1, 2**70, 3], IndexError, "indices[2] is out of range (does not fit in int64)"),
    ([0, 1, 2, "3"], TypeError, "indices[3]: expected an integer, got str"),
    ([0, -2**70, 1, 2], IndexError, "indices[1] is out of range (does not fit in int64)"),
])
def test_index_list_errors_name_the_element(st, idx, exc, msg):
    """A list of indices is converted element by element; a bad one is named
    (the fast path for plain ints must not skip these checks)."""
    s, total, comm = st
    out = torch.full((4, 6), -1.0)
    with pytest.raises(exc) as ei:
        ext.get_batch(s, "v", out, idx)
    assert msg in str(ei.value)
    assert torch.equal(out, torch.full((4, 6), -1.0))


def test_index_list_of_other_integers(st):
    """numpy integers, bools and int subclasses in a list read the same rows."""
    s, total, comm = st

    class MyInt(int):
        pass
    out = torch.empty((4, 6))
    ext.get_batch(s, "v", out, [np.int64(3), True, MyInt(2), np.uint8(0)])
    assert np.array_equal(out.numpy(), _expected([3, 1, 2, 0], 6))


def test_unwrap_errors(st):
    s, total, comm = st
    with pytest.raises(TypeError):
        ext.get_batch(object(), "v", torch.empty((1, 6)), [0])
    r = pyddstore.PyDDStore(comm, method=0)
    r.free()
    with pytest.raises(pyddstore.DDStoreError):   # use after free() (reference-pyddstore.md)
        ext.get_batch(r, "v", torch.empty((1, 6)), [0])


def test_same_store_objects(st):
    """Numbers written through pyddstore._core are read through the torch
    extension, from the same store object, and vice versa."""
    s, total, comm = st
    out_np = np.empty((5, 6), dtype=np.float32)
    s.get_batch("v", out_np, [4, 3, 2, 1, 0])
    out_t = torch.empty((5, 6))
    ext.get_batch(s, "v", out_t, [4, 3, 2, 1, 0])
    assert_all(comm, np.array_equal(out_np, out_t.numpy()), "stores differ")


def test_reader_objects(st):
    """Readers from open_reader() are accepted wherever the store is."""
    s, total, comm = st
    r = s.open_reader()
    out = torch.empty((3, 6))
    ext.get_batch(r, "v", out, [2, 0, 1])
    r.close()
    with pytest.raises(pyddstore.DDStoreError):
        ext.get_batch(r, "v", out, [2, 0, 1])
    assert_all(comm, np.array_equal(out.numpy(), _expected([2, 0, 1], 6)))


def test_register_recv(st):
    s, total, comm = st
    buf = torch.empty((8, 6))
    ext.register_recv(s, buf)
    ext.register_recv(s, buf)          # again: a no-op, as PyDDStore.register_recv
    ext.get_batch(s, "v", buf[2:5], [0, 1, 2])
    ext.unregister_recv(s, buf)
    with pytest.raises(ValueError, match="not registered"):   # as PyDDStore's
        ext.unregister_recv(s, buf)
    assert_all(comm, np.array_equal(buf[2:5].numpy(), _expected([0, 1, 2], 6)))


def test_reads_release_the_gil():
    """Two threads' reads overlap in time (their C-level read windows, taken
    with the GIL released, intersect), and Python runs during a read."""
    comm = world()
    s = pyddstore.PyDDStore(comm, method=0)
    rows, disp = 512, 16384                  # 32 MiB per rank of float32
    shard = np.full((rows, disp), comm.Get_rank(), dtype=np.float32)
    s.add("big", shard)
    mine = list(range(comm.Get_rank() * rows, (comm.Get_rank() + 1) * rows))
    outs = [torch.empty((rows, disp)) for _ in range(2)]
    overlapped = False
    ticks_during = 0
    for attempt in range(6):
        windows = [[], []]
        go = threading.Barrier(2)

        def reader(k):
            go.wait()
            t_end = time.monotonic() + 2.0
            # keep reading until the other thread has read too (or 2 s): on a
            # loaded machine one thread may only be scheduled late
            while time.monotonic() < t_end and (len(windows[k]) < 3 or
                                                 len(windows[1 - k]) < 3):
                ext.get_batch(s, "big", outs[k], mine)
                windows[k].append(ext.last_read_window())

        ts = [threading.Thread(target=reader, args=(k,)) for k in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if any(a0 < b1 and b0 < a1 for a0, a1 in windows[0] for b0, b1 in windows[1]):
            overlapped = True
        # a Python loop keeps running while another thread reads
        done = threading.Event()

        def long_read():
            for _ in range(4):
                ext.get_batch(s, "big", outs[0], mine)
            done.set()

        t = threading.Thread(target=long_read)
        n = 0
        t.start()
        while not done.is_set():
            n += 1
            time.sleep(0)
        t.join()
        ticks_during = max(ticks_during, n)
        if overlapped and ticks_during > 10:
            break
    s.free()
    assert_all(comm, overlapped, "the two threads' reads never overlapped")
    assert_all(comm, ticks_during > 10, f"Python did not run during reads ({ticks_during})")


def test_comm_capsule_torch_group():
    """A torch.distributed group as a store communicator (the _dds_comm
    capsule): PyDDStore accepts it; method 0 then asks for MPI."""
    from _torch_util import torch_pg
    from pyddstore.torch.comm import TorchComm
    comm = world()
    torch_pg(comm)
    tc = TorchComm()
    assert (tc.rank, tc.size) == (comm.Get_rank(), comm.Get_size())
    got = tc.allgather_bytes(bytes([comm.Get_rank()]) * 3)
    assert got == b"".join(bytes([r]) * 3 for r in range(comm.Get_size()))
    with pytest.raises(ValueError, match="MPI"):
        pyddstore.PyDDStore(tc, method=0)
