"""pyddstore.PyDDStore over numpy arrays: layouts, dtypes, reads."""
import numpy as np
import pytest

import pyddstore
from _util import DTYPE_IDS, DTYPES, add_var, layout, outcome, values


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("disp", [1, 5])
def test_every_dtype_roundtrip(store, dtype, disp):
    off = add_var(store, "v", dtype, disp)
    total = off[-1]
    assert store.info("v") == (total, disp, np.dtype(dtype).itemsize)
    full = store.info_full("v")
    assert full["dtype"] == np.dtype(dtype).name
    assert full["local_rows"] == off[store.rank + 1] - off[store.rank]
    assert full["local_first"] == off[store.rank]
    assert store.offsets("v") == tuple(off)
    out = np.zeros((total, disp), dtype)
    store.get("v", out, 0)
    np.testing.assert_array_equal(out, values(dtype, range(total), disp))
    assert out.tobytes() == values(dtype, range(total), disp).tobytes()   # bit-exact
    rng = np.random.default_rng(7)
    idx = rng.integers(0, total, 3 * total)
    b = np.zeros((len(idx), disp), dtype)
    store.get_batch("v", b, idx)
    np.testing.assert_array_equal(b, values(dtype, idx, disp))
    assert b.tobytes() == values(dtype, idx, disp).tobytes()


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_one_dimensional_arrays_are_rows_of_one(store, dtype):
    off = add_var(store, "v", dtype, 1, oned=True)
    total = off[-1]
    assert store.info("v") == (total, 1, np.dtype(dtype).itemsize)
    out = np.zeros(total, dtype)
    store.get("v", out)
    np.testing.assert_array_equal(out, values(dtype, range(total), 1).ravel())
    out2 = np.zeros((total, 1), dtype)  # (n, 1) reads the same rows
    store.get("v", out2)
    np.testing.assert_array_equal(out2.ravel(), out)


def test_first_and_last_row_of_every_shard(store):
    off = add_var(store, "v", np.float64, 3)
    for r in range(store.size):
        for g in {off[r], off[r + 1] - 1}:
            one = np.zeros((1, 3))
            store.get("v", one, g)
            np.testing.assert_array_equal(one, values(np.float64, [g], 3))
            store.get_batch("v", one, [g])
            np.testing.assert_array_equal(one, values(np.float64, [g], 3))


def test_get_ranges_crossing_owner_boundaries(store):
    off = add_var(store, "v", np.int64, 2)
    total = off[-1]
    for b in off[1:-1]:
        for lo, hi in [(b - 1, b + 1), (max(0, b - 2), min(total, b + 3))]:
            out = np.zeros((hi - lo, 2), np.int64)
            store.get("v", out, lo)
            np.testing.assert_array_equal(out, values(np.int64, range(lo, hi), 2))
    # every range [lo, hi) of the whole variable, start included
    for lo in range(total):
        for hi in range(lo, total + 1):
            out = np.zeros((hi - lo, 2), np.int64)
            store.get("v", out, start=lo)
            np.testing.assert_array_equal(out, values(np.int64, range(lo, hi), 2))


def test_shuffled_batches_with_repeats_equal_reference(store):
    off = add_var(store, "v", np.float32, 7)
    total = off[-1]
    rng = np.random.default_rng(1234 + store.rank)
    for n in [1, 2, total, 4 * total + 3]:
        idx = rng.integers(0, total, n)
        idx[: min(n, 3)] = idx[0]  # repeats
        out = np.full((n, 7), -1, np.float32)
        store.get_batch("v", out, idx)
        np.testing.assert_array_equal(out, values(np.float32, idx, 7))
    perm = rng.permutation(total)
    out = np.zeros((total, 7), np.float32)
    store.get_batch("v", out, perm)
    np.testing.assert_array_equal(out, values(np.float32, perm, 7))


def test_single_row_batches(store):
    off = add_var(store, "v", np.int32, 4)
    out = np.zeros((1, 4), np.int32)
    for g in range(off[-1]):
        store.get_batch("v", out, [g])
        np.testing.assert_array_equal(out, values(np.int32, [g], 4))
        store.get_batch("v", out, np.array([g], np.int64))
        np.testing.assert_array_equal(out, values(np.int32, [g], 4))


def test_empty_batch_and_range(store):
    add_var(store, "v", np.float64, 2)
    store.get_batch("v", np.zeros((0, 2)), [])
    store.get("v", np.zeros((0, 2)), 0)


def test_several_variables(store):
    specs = [("a", np.float64, 3), ("b", np.uint8, 17), ("c", np.int64, 1),
             ("d", np.bool_, 2)]
    offs = {n: add_var(store, n, dt, d) for n, dt, d in specs}
    rng = np.random.default_rng(99)
    for _ in range(3):
        for n, dt, d in specs:
            total = offs[n][-1]
            idx = rng.integers(0, total, 9)
            out = np.zeros((9, d), dt)
            store.get_batch(n, out, idx)
            np.testing.assert_array_equal(out, values(dt, idx, d))
    assert sorted(store.names()) == ["a", "b", "c", "d"]


def test_zero_row_shards(store):
    off = add_var(store, "z", np.float32, 3, zero_odd=True)
    total = off[-1]
    assert store.info("z")[0] == total
    if store.rank % 2 == 1:
        assert store.info_full("z")["local_rows"] == 0
    out = np.zeros((total, 3), np.float32)
    store.get("z", out)
    np.testing.assert_array_equal(out, values(np.float32, range(total), 3))
    idx = np.arange(total)[::-1].copy()
    store.get_batch("z", out, idx)
    np.testing.assert_array_equal(out, values(np.float32, idx, 3))


def test_variable_with_no_rows_anywhere(store):
    store.add("empty", np.zeros((0, 4), np.float64))
    assert store.info("empty") == (0, 4, 8)
    store.get_batch("empty", np.zeros((0, 4)), [])
    with pytest.raises(IndexError):
        store.get_batch("empty", np.zeros((1, 4)), [0])
    with pytest.raises(IndexError):
        store.get("empty", np.zeros((1, 4)), 0)


def test_multidimensional_rows(store):
    off = layout(store.size)
    lo, hi = off[store.rank], off[store.rank + 1]
    shard = values(np.float64, range(lo, hi), 6).reshape(-1, 2, 3)
    store.add("m", shard)
    assert store.info("m") == (off[-1], 6, 8)
    out = np.zeros((off[-1], 2, 3))
    store.get("m", out)
    np.testing.assert_array_equal(out.reshape(-1, 6), values(np.float64, range(off[-1]), 6))


def test_init_update_get(store):
    off = layout(store.size)
    mine = off[store.rank + 1] - off[store.rank]
    total = off[-1]
    store.init("u", mine, 4, itemsize=8)          # raw, 8-byte elements
    zeroed = np.ones((total, 4))
    store.get("u", zeroed)                         # zeroed shards
    store.init("_sync1", 0, 1)                     # all ranks read the zeros
    ref = values(np.float64, range(off[store.rank], off[store.rank + 1]), 4)
    store.update("u", np.ascontiguousarray(ref[::-1]), 0)   # local
    store.update("u", ref, offset=0)
    if mine > 1:
        store.update("u", ref[1:], offset=1)
    store.init("_sync2", 0, 1)                     # every rank has updated
    out = np.zeros((total, 4))
    store.get("u", out)
    # checks after the collectives: a failing rank does not strand the others
    assert store.info("u") == (total, 4, 8)
    assert store.info_full("u")["dtype"] == "raw"
    assert not zeroed.any(), zeroed
    np.testing.assert_array_equal(out, values(np.float64, range(total), 4))
    # raw variables take any buffer with the same element size
    as_int = np.zeros((total, 4), np.int64)
    store.get("u", as_int)
    np.testing.assert_array_equal(as_int.view(np.float64), out)


def test_init_with_dtype(store):
    store.init("t", 2, 3, dtype="int32")
    assert store.info("t") == (2 * store.size, 3, 4)
    assert store.info_full("t")["dtype"] == "int32"
    store.init("t2", 1, 2, dtype=np.dtype(np.float32))
    assert store.info_full("t2")["dtype"] == "float32"
    store.init("t3", 1, 2, dtype=np.bool_)
    assert store.info("t3") == (store.size, 2, 1)
    assert store.info_full("t3")["dtype"] == "bool"
    e1 = outcome(lambda: store.init("t4", 1, 2, dtype="int16"))
    e2 = outcome(lambda: store.init("t4", 1, 2, itemsize=8, dtype="float32"))
    assert isinstance(e1, TypeError) and "int16" in str(e1)
    assert isinstance(e2, ValueError) and "itemsize" in str(e2)
    with pytest.raises(TypeError):
        store.get("t", np.zeros((1, 3), np.float32), 0)


def test_float16_init_update_bit_exact(store):
    """numpy float16: init by dtype, update, get, get_batch keep every bit
    (NaN payloads, -0.0, infinities, subnormals)."""
    off = layout(store.size)
    lo, hi = off[store.rank], off[store.rank + 1]
    total = off[-1]
    store.init("h", hi - lo, 3, dtype="float16")
    store.init("h2", hi - lo, 3, dtype=np.float16)
    store.update("h", values(np.float16, range(lo, hi), 3), 0)
    store.init("_sync", 0, 1)                       # every rank has updated
    out = np.zeros((total, 3), np.float16)
    store.get("h", out)
    idx = [total - 1, 0, total - 1, 2 % total]
    b = np.zeros((len(idx), 3), np.float16)
    store.get_batch("h", b, idx)
    assert store.info("h") == (total, 3, 2)
    assert store.info_full("h")["dtype"] == store.info_full("h2")["dtype"] == "float16"
    assert out.view(np.uint16).tobytes() == values(np.float16, range(total), 3).tobytes()
    assert b.view(np.uint16).tobytes() == values(np.float16, idx, 3).tobytes()
    with pytest.raises(TypeError, match="float16"):            # a float16 variable
        store.get("h", np.zeros((1, 3), np.int16), 0)            # is not raw bytes


def _half_tensor(torch, dtype, rows, disp):
    from _util import half_bits
    g = np.asarray(rows, dtype=np.int64).reshape(-1, 1)
    j = np.arange(disp, dtype=np.int64).reshape(1, -1)
    bits = half_bits(g * 613 + j * 29 + 7, special=(g + j) % 3 != 1).astype(np.int16)
    return torch.from_numpy(np.ascontiguousarray(bits)).view(dtype)


@pytest.mark.parametrize("tdtype", ["float16", "bfloat16", "float32"])
def test_torch_cpu_tensors_bit_exact(store, tdtype):
    """CPU torch tensors (through __dlpack__, without pyddstore.torch): add,
    init by torch dtype, update, get, get_batch, register_recv; float16 and
    bfloat16 bit-exact."""
    torch = pytest.importorskip("torch")
    dt = getattr(torch, tdtype)
    off = layout(store.size)
    lo, hi = off[store.rank], off[store.rank + 1]
    total = off[-1]
    width = {"float32": torch.int32}.get(tdtype, torch.int16)

    def ref(rows):
        t = _half_tensor(torch, torch.bfloat16, rows, 4).view(torch.int16)
        return t.to(torch.int32).view(dt) if tdtype == "float32" else t.view(dt)

    shard = ref(range(lo, hi)).clone()
    store.add("t", shard)
    shard.view(width).zero_()                         # host data is copied
    store.init("u", hi - lo, 4, dtype=dt)
    store.update("u", ref(range(lo, hi)), 0)
    store.init("_sync", 0, 1)                         # every rank has updated
    out = torch.zeros((total, 4), dtype=dt)
    store.get("t", out)
    out_u = torch.zeros((total, 4), dtype=dt)
    store.register_recv("u", out_u)
    store.get("u", out_u)
    idx = torch.tensor([total - 1, 0, 1 % total, total - 1])
    b = torch.zeros((4, 4), dtype=dt)
    store.get_batch("t", b, idx)
    store.unregister_recv("u", out_u)
    assert store.info_full("t")["dtype"] == store.info_full("u")["dtype"] == tdtype
    assert store.info("t") == (total, 4, dt.itemsize)
    assert torch.equal(out.view(width), ref(range(total)).view(width))
    assert torch.equal(out_u.view(width), ref(range(total)).view(width))
    assert torch.equal(b.view(width), ref(idx.tolist()).view(width))
    other = {"float16": torch.bfloat16, "bfloat16": torch.float16,
             "float32": torch.int32}[tdtype]
    with pytest.raises(TypeError, match=tdtype):      # same size, another dtype
        store.get("t", torch.zeros((1, 4), dtype=other), 0)


def test_torch_cpu_tensor_errors(store):
    torch = pytest.importorskip("torch")
    add_var(store, "v", np.float32, 2)
    with pytest.raises(TypeError, match="int16"):
        store.get("v", torch.zeros((1, 2), dtype=torch.int16), 0)
    with pytest.raises(ValueError, match="contiguous"):
        store.get("v", torch.zeros((2, 4))[:, ::2], 0)
    with pytest.raises(ValueError, match="0-D"):
        store.get("v", torch.tensor(1.0), 0)
    e = outcome(lambda: store.add("g", torch.zeros((2, 2), requires_grad=True)))
    assert isinstance(e, TypeError) and "gradient" in str(e), e
    out = torch.zeros((store.info("v")[0], 2))
    store.get("v", out)                               # the store is still usable
    assert out.numpy().tobytes() == values(np.float32, range(len(out)), 2).tobytes()


def test_structured_records_are_raw_bytes(store):
    rec = np.dtype([("a", "<i4"), ("b", "<f8")])
    off = layout(store.size)
    lo, hi = off[store.rank], off[store.rank + 1]
    shard = np.zeros(hi - lo, rec)
    shard["a"] = np.arange(lo, hi)
    shard["b"] = np.arange(lo, hi) * 0.5
    store.add("rec", shard)
    assert store.info("rec") == (off[-1], 1, rec.itemsize)
    assert store.info_full("rec")["dtype"] == "raw"
    out = np.zeros(off[-1], rec)
    store.get("rec", out)
    np.testing.assert_array_equal(out["a"], np.arange(off[-1]))
    np.testing.assert_array_equal(out["b"], np.arange(off[-1]) * 0.5)
    void = np.zeros(3, np.dtype(("V", rec.itemsize)))
    store.get_batch("rec", void, [off[-1] - 1, 0, 1])
    np.testing.assert_array_equal(void.view(rec)["a"], [off[-1] - 1, 0, 1])


@pytest.mark.parametrize("kind", ["list", "tuple", "range", "int32", "uint16",
                                  "int64", "uint64", "strided", "numpy_ints"])
def test_index_kinds(store, kind):
    off = add_var(store, "v", np.float64, 2)
    total = off[-1]
    base = [total - 1, 0, total // 2, 0]
    idx = {
        "list": base,
        "tuple": tuple(base),
        "range": range(total - 1, -1, -1),
        "int32": np.array(base, np.int32),
        "uint16": np.array(base, np.uint16),
        "int64": np.array(base, np.int64),
        "uint64": np.array(base, np.uint64),
        "strided": np.repeat(np.array(base, np.int64), 2)[::2],
        "numpy_ints": [np.int64(i) for i in base],
    }[kind]
    expect = list(idx)
    out = np.zeros((len(expect), 2))
    store.get_batch("v", out, idx)
    np.testing.assert_array_equal(out, values(np.float64, expect, 2))


def test_profile_counters(store):
    off = add_var(store, "v", np.float32, 2)
    p0 = store.get_profile("v")
    names = {"calls", "rows", "bytes", "reads", "local_bytes", "staged_bytes",
             "registrations", "lock_wait_ns", "register_ns", "post_ns",
             "complete_ns", "gpu_sync_ns", "other_ns", "total_ns",
             # the original DDStore's names (test_profile_original_names)
             "lock_wait", "mr", "mr_miss", "read", "cq"}
    assert set(p0) == names
    out = np.zeros((off[-1], 2), np.float32)
    store.get("v", out)
    store.get_batch("v", out[:3], [0, 1, 0])
    p1 = store.get_profile("v")
    assert p1["calls"] - p0["calls"] == 2
    assert p1["rows"] - p0["rows"] == off[-1] + 3
    assert p1["bytes"] - p0["bytes"] == (off[-1] + 3) * 8
    store.reset_profile("v")
    assert store.get_profile("v")["calls"] == 0


# the original DDStore's get_profile names -> ours (same meaning, nanoseconds)
ORIGINAL_PROFILE_NAMES = {"calls": "calls", "rows": "rows", "lock_wait": "lock_wait_ns",
                          "mr": "register_ns", "mr_miss": "registrations",
                          "read": "post_ns", "cq": "complete_ns"}


def test_profile_original_names(store):
    """get_profile keeps our counters and offers the original's names too,
    with the same values (one snapshot), also through a reader."""
    off = add_var(store, "v", np.int64, 3)
    total = off[-1]
    out = np.zeros((total, 3), np.int64)
    for _ in range(3):
        store.get("v", out)
        store.get_batch("v", out[:4], [total - 1, 0, total // 2, 0])
    rd = store.open_reader()
    try:
        rd.get("v", out)
        for p in (store.get_profile("v"), rd.get_profile("v")):
            for orig, ours in ORIGINAL_PROFILE_NAMES.items():
                assert orig in p, orig
                assert isinstance(p[orig], int)
                assert p[orig] == p[ours], (orig, ours, p)
            assert p["calls"] == 7
            assert p["rows"] == 4 * total + 12
    finally:
        rd.close()
    store.reset_profile("v")
    p = store.get_profile("v")
    assert all(p[k] == 0 for k in ORIGINAL_PROFILE_NAMES)


def test_register_recv(store):
    off = add_var(store, "v", np.float64, 3)
    total = off[-1]
    buf = np.zeros((total, 3))
    store.register_recv("v", buf)
    store.register_recv("v", buf)    # again: a no-op, as in the original
    store.get("v", buf)
    np.testing.assert_array_equal(buf, values(np.float64, range(total), 3))
    buf[:] = 0
    store.get_batch("v", buf[1:3], [total - 1, 0])   # a slice of it
    np.testing.assert_array_equal(buf[1:3], values(np.float64, [total - 1, 0], 3))
    store.unregister_recv("v", buf)  # one unregister undoes both registrations
    with pytest.raises(ValueError, match="not registered"):
        store.unregister_recv("v", buf)
    with pytest.raises(pyddstore.DDStoreKeyError):
        store.register_recv("nope", buf)


def test_register_recv_again_is_a_noop(store):
    """The original's contract: registering a registered buffer again is a
    no-op; unregistering one that is not registered (never, or twice) is a
    ValueError (not a KeyError: the name is fine)."""
    off = add_var(store, "v", np.int64, 2)
    total = off[-1]
    buf = np.zeros((total, 2), np.int64)
    other = np.zeros((total, 2), np.int64)
    with pytest.raises(ValueError, match="not registered") as ei:
        store.unregister_recv("v", buf)           # never registered
    assert not isinstance(ei.value, KeyError)
    for _ in range(3):
        store.register_recv("v", buf)
    store.register_recv("v", buf[1:])             # another range: its own registration
    view = buf.view()                             # the same memory through another object
    store.register_recv("v", view)
    store.get_batch("v", buf, list(range(total))[::-1])
    np.testing.assert_array_equal(buf, values(np.int64, list(range(total))[::-1], 2))
    store.unregister_recv("v", buf)
    store.unregister_recv("v", buf[1:])
    for b in (buf, view, buf[1:]):
        with pytest.raises(ValueError, match="not registered"):
            store.unregister_recv("v", b)
    with pytest.raises(ValueError, match="not registered"):
        store.unregister_recv("v", other)
    store.get("v", other)                         # reads still work, unregistered
    np.testing.assert_array_equal(other, values(np.int64, range(total), 2))


def test_properties_and_repr(store):
    assert 0 <= store.rank < store.size
    assert store.method == 0
    assert not store.destroyed
    assert "rank %d of %d" % (store.rank, store.size) in repr(store)


def test_context_manager_frees(store):
    with pyddstore.PyDDStore(None) as s:
        add_var(s, "v", np.int32, 1)
        assert s.info("v")[1] == 1
    with pytest.raises(pyddstore.DDStoreError, match="released"):
        s.get("v", np.zeros((1, 1), np.int32))


def test_free_then_add_again(store):
    add_var(store, "v", np.float64, 2)
    store.free()
    second = outcome(store.free)                   # idempotent
    errs = [outcome(lambda: store.get("v", np.zeros((1, 2)))),
            outcome(lambda: store.get_batch("v", np.zeros((1, 2)), [0])),
            outcome(lambda: store.info("v"))]
    off = add_var(store, "v", np.int32, 3)         # a new shape and dtype
    assert second is None
    assert isinstance(errs[0], pyddstore.DDStoreError) and "released" in str(errs[0])
    assert all(isinstance(e, pyddstore.DDStoreError) for e in errs), errs
    out = np.zeros((off[-1], 3), np.int32)
    store.get("v", out)
    np.testing.assert_array_equal(out, values(np.int32, range(off[-1]), 3))


def test_get_batch_arguments_by_keyword_and_position(store):
    """get_batch takes its three arguments positionally (the fast path) or
    by keyword, on the store and on a reader, with the same rows; a wrong
    argument list is the same TypeError as for any other method."""
    off = add_var(store, "v", np.float32, 3)
    idx = np.array([off[-1] - 1, 0, off[-1] - 1], dtype=np.int64)
    want = values(np.float32, idx, 3)
    rd = store.open_reader()
    try:
        for obj in (store, rd):
            for call in (lambda o: obj.get_batch("v", o, idx),
                         lambda o: obj.get_batch("v", o, indices=idx),
                         lambda o: obj.get_batch(name="v", arr=o, indices=idx),
                         lambda o: obj.get_batch(indices=idx, arr=o, name="v")):
                out = np.zeros((len(idx), 3), np.float32)
                assert call(out) is None
                np.testing.assert_array_equal(out, want)
            out = np.zeros((len(idx), 3), np.float32)
            with pytest.raises(TypeError, match=r"get_batch\(\) missing required argument 'indices'"):
                obj.get_batch("v", out)
            with pytest.raises(TypeError, match=r"get_batch\(\) takes at most 3 arguments \(4 given\)"):
                obj.get_batch("v", out, idx, 0)
            for kw in ({"name": "v"}, {"bogus": 1}):
                with pytest.raises(TypeError, match=r"get_batch\(\) takes at most 3 arguments \(4 given\)"):
                    obj.get_batch("v", out, idx, **kw)
            with pytest.raises(TypeError, match=r"get_batch\(\) missing required argument 'name' \(pos 1\)"):
                obj.get_batch()
            with pytest.raises(TypeError, match=r"get_batch\(\) missing required argument 'indices' \(pos 3\)"):
                obj.get_batch("v", out, arr=out)
            with pytest.raises(TypeError, match="name: expected str"):
                obj.get_batch(1, out, idx)
    finally:
        rd.close()
