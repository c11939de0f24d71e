"""DistDataset: items equal the source for every sample kind, method and
chunk_size; encode/decode/fields; records; read_rows/alloc; errors on every
rank; comm kinds; devices.

Run: tools/ddrun -n 4 -- .venv/bin/python -m pytest -q python/tests/test_torch_dataset.py
"""
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import pyddstore  # noqa: E402
from _torch_util import (KINDS, N_ODD, RECORD_KINDS, Source, assert_all,  # noqa: E402
                         env_set, fresh_name, make_sample, require_method, same,
                         shared_tmpdir, torch_pg, world)
from pyddstore.torch import DistDataset  # noqa: E402
from pyddstore.torch._ext import ext  # noqa: E402


def _check_items(comm, ds, src_fn, n, decode=None):
    """Every item, a shuffled batch with repeats, and __getitems__ equal the source."""
    bad = ""
    for i in range(n):
        w = same(ds[i], src_fn(i), f"ds[{i}]")
        if w:
            bad = w
            break
    rng = np.random.default_rng(7 + comm.Get_rank())
    idx = rng.integers(0, n, 2 * n).tolist() + [n - 1, 0, 0]
    if not bad:
        got = ds.__getitems__(idx)
        for i, g in zip(idx, got):
            w = same(g, src_fn(i), f"__getitems__[{i}]")
            if w:
                bad = w
                break
    if not bad:
        w = same(ds[-1], src_fn(n - 1), "ds[-1]")
        bad = w
    assert_all(comm, not bad, bad)


def _methods():
    return [0, 1, 2]


def _make(src, name, comm, method, **kw):
    if method != 0:
        require_method(method, comm)
        kw.setdefault("handshake_dir", shared_tmpdir(comm, "hs"))
    return DistDataset(src, name, comm, method=method, **kw)


@pytest.mark.parametrize("method", _methods())
@pytest.mark.parametrize("chunk", [None, 4])
@pytest.mark.parametrize("kind", KINDS + RECORD_KINDS)
def test_items_equal_source(kind, chunk, method):
    comm = world()
    src = Source(kind)
    ds = _make(src, fresh_name("k"), comm, method, chunk_size=chunk)
    try:
        assert len(ds) == N_ODD
        _check_items(comm, ds, lambda i: make_sample(kind, i), N_ODD)
    finally:
        ds.free()


@pytest.mark.parametrize("chunk", [1, 3, 1000])
def test_chunk_sizes(chunk):
    comm = world()
    ds = DistDataset(Source("dict"), fresh_name("c"), comm, chunk_size=chunk)
    try:
        _check_items(comm, ds, lambda i: make_sample("dict", i), N_ODD)
    finally:
        ds.free()


def test_one_pass_over_the_share():
    """Each rank reads each of its samples exactly once while loading."""
    comm = world()
    for chunk in (None, 5):
        src = Source("tuple")
        ds = DistDataset(src, fresh_name("p"), comm, chunk_size=chunk)
        share = ds.hi - ds.lo
        calls = src.calls
        ds.free()
        assert_all(comm, calls == share, f"chunk {chunk}: {calls} reads for {share} samples")
    counts = comm.allgather(share)
    assert sum(counts) == N_ODD and max(counts) - min(counts) <= 1


def test_shapes_dtypes_and_store():
    comm = world()
    ds = DistDataset(Source("dict"), fresh_name("s"), comm)
    try:
        assert ds.shapes == {"x": (2,), "y": (), 3: (4,)}
        assert ds.dtypes == {"x": "int64", "y": "float64", 3: "bool"}   # as the original
        assert isinstance(ds.ddstore, pyddstore.PyDDStore)
        assert ds.fields == ["x", "y", 3]
        assert list(ds[0].keys()) == ["x", "y", 3]          # dict keys keep their type
    finally:
        ds.free()


def _expected_dtype_shape(v):
    """What ds.dtypes / ds.shapes say of one field value (the original's
    convention: the stored element type's name, the per-sample shape)."""
    if isinstance(v, torch.Tensor):
        return str(v.dtype).replace("torch.", ""), tuple(v.shape)
    if isinstance(v, (np.ndarray, np.generic)):
        if v.dtype.names is not None:         # a record: its structured dtype
            return v.dtype, tuple(np.shape(v))
        return v.dtype.name, tuple(np.shape(v))
    return {bool: "bool", int: "int64", float: "float64"}[type(v)], ()


@pytest.mark.parametrize("kind", KINDS + RECORD_KINDS)
def test_dtypes_are_names_and_shapes_plain_tuples(kind):
    """ds.dtypes: {key: 'float32' | 'int64' | ...} strings, a record field
    its structured np.dtype (as the original); ds.shapes: {key: tuple of
    ints} (not torch.Size, no numpy integers)."""
    comm = world()
    ds = DistDataset(Source(kind), fresh_name("dt"), comm)
    try:
        s0 = make_sample(kind, 0)
        items = s0.items() if isinstance(s0, dict) else \
            enumerate(s0) if isinstance(s0, (tuple, list)) else [(0, s0)]
        want = {k: _expected_dtype_shape(v) for k, v in items}
        dtypes, shapes = ds.dtypes, ds.shapes
        bad = ""
        if dtypes != {k: d for k, (d, _) in want.items()}:
            bad = f"dtypes {dtypes} != {want}"
        elif shapes != {k: sh for k, (_, sh) in want.items()}:
            bad = f"shapes {shapes} != {want}"
        elif not all(type(d) is str if want[k][0].__class__ is str else
                     isinstance(d, np.dtype) and d.names is not None
                     for k, d in dtypes.items()):
            bad = f"dtypes not str (records: structured np.dtype): {dtypes!r}"
        elif not all(type(sh) is tuple and all(type(x) is int for x in sh)
                     for sh in shapes.values()):
            bad = f"shapes not tuples of int: {shapes!r}"
        assert_all(comm, not bad, bad)
    finally:
        ds.free()


def test_batch_get_off_reads_per_sample(monkeypatch):
    """DDSTORE_BATCH_GET is read when the dataset is created: a dataset
    created with it 0 reads per sample; changing it afterwards changes
    neither dataset."""
    comm = world()
    ds = DistDataset(Source("tuple"), fresh_name("b"), comm)
    env_set(monkeypatch, DDSTORE_BATCH_GET=0)
    off = DistDataset(Source("tuple"), fresh_name("b"), comm)
    try:
        idx = [5, 1, 36, 1]
        want = [make_sample("tuple", i) for i in idx]
        calls = []
        for d in (ds, off, ds, off):
            d.ddstore.reset_profile(d.schema.fields[0].var)
            got = d.__getitems__(idx)
            calls.append((d.get_profile(0)["calls"], same(got, want)))
            env_set(monkeypatch, DDSTORE_BATCH_GET=1 if d is ds else 0)
        ok = calls == [(1, ""), (len(idx), "")] * 2
        assert_all(comm, ok, f"(calls, mismatch) batched / per sample, twice: {calls}")
    finally:
        off.free()
        ds.free()


def test_fork_workers_read_at_creation(monkeypatch):
    """DDSTORE_FORK_WORKERS is read when the dataset is created: set only
    afterwards, a forked DataLoader worker of a method-1 dataset still
    raises the RuntimeError that names it (on every rank, nothing
    collective)."""
    from torch.utils.data import DataLoader
    comm = world()
    require_method(1, comm)
    env_set(monkeypatch, DDSTORE_FORK_WORKERS=None)
    ds = DistDataset(Source("tuple"), fresh_name("fw"), comm, method=1,
                     handshake_dir=shared_tmpdir(comm, "fw"))
    env_set(monkeypatch, DDSTORE_FORK_WORKERS=1)
    try:
        err = None
        try:
            next(iter(DataLoader(ds, batch_size=4, num_workers=1,
                                 multiprocessing_context="fork")))
        except RuntimeError as e:
            err = e
        ok = err is not None and "DDSTORE_FORK_WORKERS=1" in str(err)
        assert_all(comm, ok, f"a forked worker read: {err!r}")
    finally:
        ds.free()


# -------------------------------------------------- encode / decode / fields --
LABELS = ["cat", "dog", "owl"]
GROUP_INFO = {0: "even group", 1: "odd group"}


def _pet(i):
    return {"x": torch.full((3,), float(i)), "label": LABELS[i % 3], "group": i % 2}


def test_encode_decode():
    comm = world()
    src = Source("pets", fn=_pet)
    ds = DistDataset(src, fresh_name("pets"), comm,
                     encode=lambda s: {"x": s["x"], "label": LABELS.index(s["label"]),
                                       "group": s["group"]},
                     decode=lambda d, i: {**d, "label": LABELS[d["label"]],
                                          "meta": GROUP_INFO[d["group"]], "index": i})
    try:
        def want(i):
            s = _pet(i)
            return {**s, "meta": GROUP_INFO[s["group"]], "index": i}
        _check_items(comm, ds, want, N_ODD)
        rows = ds.read_rows([4, 2])                        # skips decode
        ok = rows["label"].tolist() == [1, 2] and rows["x"].shape == (2, 3)
        assert_all(comm, ok, "read_rows must return the stored (encoded) values")
    finally:
        ds.free()


@pytest.mark.parametrize("kind,fields,want", [
    ("tuple", [1], lambda s: (s[1],)),
    ("tuple", [1, 0], lambda s: (s[1], s[0])),
    ("dict", ["y", 3], lambda s: {"y": s["y"], 3: s[3]}),
    ("list", [2], lambda s: [s[2]]),
])
def test_fields(kind, fields, want):
    comm = world()
    ds = DistDataset(Source(kind), fresh_name("f"), comm, fields=fields)
    try:
        _check_items(comm, ds, lambda i: want(make_sample(kind, i)), N_ODD)
        assert ds.fields == fields
        # only the kept fields are stored
        names = set(ds.ddstore.names())
        assert names == {f.var for f in ds.schema.fields}
    finally:
        ds.free()


def test_fields_drop_unstorable_values():
    """Fields not kept are neither stored nor checked (a string, a changing shape)."""
    comm = world()

    def fn(i):
        return {"x": torch.full((2,), float(i)), "name": f"sample {i}",
                "ragged": torch.zeros(i % 3 + 1)}
    ds = DistDataset(Source("x", fn=fn), fresh_name("fd"), comm, fields=["x"])
    try:
        _check_items(comm, ds, lambda i: {"x": fn(i)["x"]}, N_ODD)
    finally:
        ds.free()


# ---------------------------------------------------------------- records --
def test_records_layout_and_read_rows():
    comm = world()
    ds = DistDataset(Source("recdict"), fresh_name("r"), comm)
    try:
        rows = ds.read_rows([3, 1, 3])
        r = rows["r"]
        ok = (isinstance(r, np.ndarray) and r.dtype == make_sample("recdict", 0)["r"].dtype
              and r.shape == (3, 2) and r[0].tobytes() == make_sample("recdict", 3)["r"].tobytes()
              and rows["t"].shape == (3, 3))
        s = ds[5]["r"]
        ok = ok and s.dtype.names == ("id", "w", "flag", "v") and s["v"].shape == (2, 2)
        assert_all(comm, ok, "records lost their layout")
        # records batch with a custom collate_fn (default_collate cannot)
        loader = torch.utils.data.DataLoader(
            ds, batch_size=4, collate_fn=lambda b: (np.stack([s["r"] for s in b]),
                                                   torch.stack([s["t"] for s in b])))
        recs, ts = next(iter(loader))
        ok = recs.shape == (4, 2) and recs.dtype == s.dtype and ts.shape == (4, 3)
        assert_all(comm, ok, "custom collate of records")
    finally:
        ds.free()


# -------------------------------------------------------- read_rows / alloc --
def test_read_rows_and_alloc_reuse():
    comm = world()
    ds = DistDataset(Source("tuple"), fresh_name("a"), comm)
    try:
        bufs = ds.alloc(8)
        prof0 = ds.get_profile()
        got = []
        for rows in ([5, 1, 1, 36], [0, 2, 4, 6, 8, 10, 12, 14], [20]):
            r = ds.read_rows(rows, out=bufs)
            got.append((rows, r))
            view_ok = r[0].data_ptr() == bufs[0].data_ptr() and r[1].data_ptr() == bufs[1].data_ptr()
            assert view_ok, "read_rows(out=) must return views into the buffers"
            want0 = torch.stack([make_sample("tuple", i)[0] for i in rows])
            want1 = torch.tensor([make_sample("tuple", i)[1] for i in rows])
            assert torch.equal(r[0], want0) and torch.equal(r[1], want1)
        samples = ds.__getitems__([3, 4], out=bufs)
        assert samples[0][0].data_ptr() == bufs[0].data_ptr()
        assert not same(samples, [make_sample("tuple", 3), make_sample("tuple", 4)])
        prof1 = ds.get_profile()
        # registered once at alloc(): reads into the buffers register nothing
        assert prof1["registrations"] == prof0["registrations"]
        sub = ds.alloc(4, fields=[1])
        r = ds.read_rows([7, 8], fields=[1], out=sub)
        assert list(r) == [1] and r[1].tolist() == [7 % 10, 8 % 10]
        with pytest.raises(ValueError):
            ds.read_rows(list(range(9)), out=bufs)       # more rows than the buffers
        with pytest.raises(ValueError):
            ds.read_rows([1], fields=[0], out=sub)       # no buffer for field 0
        ds.release(bufs)
        with pytest.raises(ValueError, match="not registered"):   # as the original
            ds.release(bufs)
        ds.release(sub)
    finally:
        ds.free()
    ds.free()                                             # idempotent
    with pytest.raises(pyddstore.DDStoreError):
        ds[0]


def test_read_rows_unknown_field_is_key_error():
    comm = world()
    ds = DistDataset(Source("dict"), fresh_name("uk"), comm)
    try:
        for fields in (["nope"], ["x", "nope"], "nope", [0]):
            with pytest.raises(KeyError, match="nope" if fields != [0] else "0") as e:
                ds.read_rows([0, 1], fields=fields)
            assert "not in the sample's fields" in str(e.value)   # a message, not repr
        with pytest.raises(KeyError, match="nope"):
            ds.alloc(2, fields=["nope"])
        with pytest.raises(KeyError, match="nope"):
            ds.get_profile("nope")
        r = ds.read_rows([2], fields=["y"])                # the dataset is fine
        assert_all(comm, list(r) == ["y"] and r["y"].tolist() == [0.5], f"{r}")
    finally:
        ds.free()


@pytest.mark.parametrize("method", [0, 1])
def test_release_after_free(method):
    """release() of alloc() buffers after free() is a ValueError for every
    method; alloc() after free() a DDStoreError; free() stays idempotent."""
    comm = world()
    ds = _make(Source("tuple"), fresh_name("rf"), comm, method)
    bufs = ds.alloc(3)
    ds.release(bufs)
    with pytest.raises(ValueError, match="not registered"):   # twice: as the original
        ds.release(bufs)
    with pytest.raises(ValueError, match="not registered"):   # not from alloc()
        ds.release({0: torch.zeros(3)})
    bufs2 = ds.alloc(3)
    ds.free()
    with pytest.raises(ValueError, match="free"):
        ds.release(bufs2)
    with pytest.raises(ValueError, match="free"):
        ds.release(bufs)
    with pytest.raises(pyddstore.DDStoreError, match="free"):
        ds.alloc(2)
    ds.free()
    assert_all(comm, not ds._allocs, f"{len(ds._allocs)} buffer sets left")


@pytest.mark.parametrize("method", [0, 1])
def test_release_after_close(method):
    """close() is free() by another name: release() afterwards a ValueError."""
    comm = world()
    ds = _make(Source("tuple"), fresh_name("rc"), comm, method)
    bufs = ds.alloc(2)
    ds.close()
    with pytest.raises(ValueError, match="close"):
        ds.release(bufs)
    ds.close()                                            # idempotent
    with pytest.raises(pyddstore.DDStoreError):
        ds[0]


# ---------------------------------------------------- errors on every rank --
def _expect_all(comm, exc_types, fn, match=None):
    """fn() raises one of exc_types on every rank (never hangs, never passes)."""
    try:
        fn()
    except exc_types as e:
        msg = str(e)
        ok = match is None or match in msg
        assert_all(comm, ok, f"message {msg!r} lacks {match!r}")
        return
    except Exception as e:  # noqa: BLE001
        assert_all(comm, False, f"raised {type(e).__name__}: {e}")
    assert_all(comm, False, "did not raise")


def _remote_type(t):
    """Types a non-failing rank may see for an error raised on another rank."""
    return (t, RuntimeError)


@pytest.mark.parametrize("case,exc,match", [
    ("int8", TypeError, "int8"),
    ("int16", TypeError, "int16"),
    ("nested", TypeError, "nested"),
    ("object", TypeError, "str"),
    ("none", TypeError, "NoneType"),
    ("complex", TypeError, "complex"),
])
def test_unsupported_samples(case, exc, match):
    comm = world()
    fn = {"int8": lambda i: torch.zeros(2, dtype=torch.int8),
          "int16": lambda i: np.zeros(2, dtype=np.int16),
          "nested": lambda i: (torch.zeros(2), (1, 2)),
          "object": lambda i: {"x": torch.zeros(2), "name": "abc"},
          "none": lambda i: (torch.zeros(2), None),
          "complex": lambda i: torch.zeros(2, dtype=torch.complex64)}[case]
    _expect_all(comm, exc, lambda: DistDataset(Source("x", fn=fn), fresh_name("u"), comm),
                match)


@pytest.mark.parametrize("case", ["shape", "dtype", "kind", "width", "key"])
def test_shape_change_on_one_rank(case):
    """A sample that differs from the first, owned by the last rank only."""
    comm = world()
    last = N_ODD - 1

    def fn(i):
        x = torch.zeros(3)
        if i == last:
            x = {"shape": torch.zeros(4), "dtype": torch.zeros(3, dtype=torch.float64),
                 "kind": np.zeros(3, dtype=np.float32), "width": x, "key": x}[case]
        if case == "width":
            return (x, 1) if i != last else (x, 1, 2)
        if case == "key":
            return {"a": x, "b": 1} if i != last else {"a": x, "c": 1}
        return (x, 1)
    _expect_all(comm, _remote_type(ValueError),
                lambda: DistDataset(Source("x", fn=fn), fresh_name("sc"), comm))


def test_rank_dependent_dtype():
    """The first samples of two ranks differ: ValueError on every rank."""
    comm = world()
    if comm.Get_size() == 1:
        pytest.skip("needs 2 ranks")
    n = N_ODD

    def fn(i):
        return torch.zeros(2, dtype=torch.float32 if i < n // 2 else torch.float64)
    _expect_all(comm, ValueError, lambda: DistDataset(Source("x", fn=fn), fresh_name("rd"), comm),
                "differ")


def test_source_raises_on_one_rank():
    comm = world()
    src = Source("tuple", fail_at=N_ODD - 2)          # owned by the last rank
    _expect_all(comm, (ZeroDivisionError, RuntimeError),
                lambda: DistDataset(src, fresh_name("x"), comm), "refuses sample")
    # first sample of rank 0 raising, with chunks
    src = Source("tuple", fail_at=0)
    _expect_all(comm, (ZeroDivisionError, RuntimeError),
                lambda: DistDataset(src, fresh_name("x"), comm, chunk_size=2), "refuses")
    # the world is still usable
    ds = DistDataset(Source("tuple"), fresh_name("ok"), comm)
    ds.free()


def test_argument_errors():
    comm = world()
    src = Source("dict")
    for kw, match in ((dict(fields=["x"], encode=lambda s: s), "encode"),
                      (dict(fields=["nope"]), "nope"),
                      (dict(chunk_size=0), "chunk_size"),
                      (dict(method=7), "method"),
                      (dict(ddstore_width=0), "ddstore_width")):
        _expect_all(comm, ValueError, lambda: DistDataset(src, fresh_name("e"), comm, **kw), match)
    size = comm.Get_size()
    _expect_all(comm, ValueError,
                lambda: DistDataset(Source("tuple", n=size - 1), fresh_name("e"), comm),
                "at least one sample")


def test_len_differs_across_ranks():
    comm = world()
    if comm.Get_size() == 1:
        pytest.skip("needs 2 ranks")
    src = Source("tuple", n=N_ODD + comm.Get_rank())
    _expect_all(comm, ValueError, lambda: DistDataset(src, fresh_name("l"), comm), "len")


def test_first_samples_differ_across_ranks_names_ragged():
    """Variable-size samples without ragged=True, the ranks' first samples
    differing (each rank's own samples alike): the error on every rank names
    ragged=True, as the error table says (within one rank it did already)."""
    comm = world()
    size = comm.Get_size()
    if size == 1:
        pytest.skip("needs 2 ranks")
    n = 2 * size
    src = [torch.zeros(2 + i * size // n) for i in range(n)]     # rank r's share: 2 + r
    _expect_all(comm, ValueError, lambda: DistDataset(src, fresh_name("vr"), comm),
                "ragged=True")


# ----------------------------------------------------------- devices / comms --
def test_device_cpu_and_add_device_cpu():
    comm = world()
    for kw in (dict(device="cpu"), dict(add_device="cpu"),
               dict(device=torch.device("cpu"), chunk_size=3)):
        ds = DistDataset(Source("tuple"), fresh_name("d"), comm, **kw)
        try:
            _check_items(comm, ds, lambda i: make_sample("tuple", i), N_ODD)
        finally:
            ds.free()
    # chunk_size with any add_device (also "cpu"): ValueError on every rank, as the original
    _expect_all(comm, ValueError,
                lambda: DistDataset(Source("tuple"), fresh_name("d"), comm, add_device="cpu",
                                    chunk_size=4), "add_device")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (CUDA/ROCm)")
def test_gpu_device_and_add_device():
    comm = world()
    dev = torch.device("cuda", 0)
    ds = DistDataset(Source("tuple"), fresh_name("g"), comm, device=dev, add_device=dev)
    try:
        x, y = ds[3]
        assert x.device.type == "cuda" and isinstance(y, int)
        assert torch.equal(x.cpu(), make_sample("tuple", 3)[0])
    finally:
        ds.free()
    with pytest.raises(ValueError, match="add_device"):
        DistDataset(Source("tuple"), fresh_name("g"), comm, add_device=dev, chunk_size=4)


def test_ddstore_width():
    """Independent stores of `width` ranks, each a full replica."""
    comm = world()
    size = comm.Get_size()
    width = 2 if size >= 2 else 1
    ds = DistDataset(Source("tuple"), fresh_name("w"), comm, ddstore_width=width)
    try:
        assert ds.ddstore.size == min(width, size - (comm.Get_rank() // width) * width)
        _check_items(comm, ds, lambda i: make_sample("tuple", i), N_ODD)
    finally:
        ds.free()


def test_ddstore_width_several_alive():
    """Several partitioned datasets alive at once, with several fields each
    (Open MPI 4.1 on one node names window segments after context ids, which
    disjoint groups share: the MPI transport keeps the groups' ids apart)."""
    comm = world()
    width = 2 if comm.Get_size() >= 2 else 1
    a = DistDataset(Source("dict"), fresh_name("wa"), comm, ddstore_width=width)
    b = DistDataset(Source("tuple"), fresh_name("wb"), comm, ddstore_width=width,
                    chunk_size=5)
    try:
        _check_items(comm, a, lambda i: make_sample("dict", i), N_ODD)
        _check_items(comm, b, lambda i: make_sample("tuple", i), N_ODD)
    finally:
        b.free()
        a.free()


def test_comm_mpi_resolution(monkeypatch):
    from pyddstore.torch.comm import resolve
    comm = world()
    assert resolve(comm).kind == "mpi"
    env_set(monkeypatch, DDSTORE_COMM=None)
    assert resolve(None).kind == "mpi"       # None -> MPI.COMM_WORLD with MPI
    env_set(monkeypatch, DDSTORE_COMM="bogus")
    with pytest.raises(ValueError, match="DDSTORE_COMM"):
        resolve(None)
    with pytest.raises(TypeError):
        resolve(object())


def test_comm_mpi_collectives_run_in_c(monkeypatch):
    """mpi4py over pyddstore's own MPI library: the Python layer's
    collectives run in C over the communicator itself (the Python byte mover
    is not called); over another library (mpi_same_library() False) they
    fall back to the byte mover, with the same results."""
    from pyddstore import _core
    from pyddstore.torch import comm as tcomm
    comm = world()
    if not pyddstore.HAVE_MPI or comm.Get_size() < 2:
        pytest.skip("needs an MPI build and 2 or more ranks")
    assert _core.mpi_same_library()
    calls = []

    def mover(self, data):
        calls.append(len(data))
        return real(self, data)

    real = tcomm._MpiBytes.allgather_bytes
    monkeypatch.setattr(tcomm._MpiBytes, "allgather_bytes", mover)
    for same in (True, False):
        monkeypatch.setattr(_core, "mpi_same_library", lambda s=same: s)
        c = tcomm.resolve(comm)
        assert c.allgather(("r", c.rank)) == [("r", r) for r in range(c.size)]
        c.barrier()
        err = ValueError("bad on the last rank") if c.rank == c.size - 1 else None
        with pytest.raises(ValueError, match="bad on the last rank"):
            tcomm.agree(c, err, "step")
        assert bool(calls) is not same, (same, calls)


def test_comm_torch_group(monkeypatch):
    """A torch.distributed group: resolution, agreement over its collectives
    and (method 1) a DistDataset whose exchange runs through it."""
    from pyddstore.torch.comm import agree, resolve
    import torch.distributed as dist
    comm = world()
    pg = torch_pg(comm)
    c = resolve(pg)
    assert c.kind == "torch" and (c.rank, c.size) == (comm.Get_rank(), comm.Get_size())
    assert c.allgather(c.rank * 2) == [2 * r for r in range(c.size)]
    env_set(monkeypatch, DDSTORE_COMM="torch")
    assert resolve(None).kind == "torch"
    env_set(monkeypatch, DDSTORE_COMM=None, DDSTORE_MPI=0)
    assert resolve(None).kind == "torch"     # no MPI: the default torch.distributed group
    env_set(monkeypatch, DDSTORE_MPI=None)
    # agreement: one rank's error is raised on every rank
    last = c.size - 1
    err = ValueError("bad on the last rank") if c.rank == last else None
    with pytest.raises(ValueError, match="bad on the last rank"):
        agree(c, err)
    with pytest.raises(ValueError, match="MPI"):
        DistDataset(Source("tuple"), fresh_name("t"), pg, method=0)
    require_method(1, comm)
    ds = DistDataset(Source("tuple"), fresh_name("t"), dist.group.WORLD,
                     handshake_dir=shared_tmpdir(comm, "hs"))
    try:
        assert ds.method == 1
        _check_items(comm, ds, lambda i: make_sample("tuple", i), N_ODD)
    finally:
        ds.free()


def test_comm_torch_collective_mismatch():
    """Ranks in different collectives over a torch.distributed group fail on
    every rank with "collective mismatch" (core checks the byte mover's
    lengths before the payload), never with a wrong value or a hang."""
    from pyddstore.torch.comm import resolve
    comm = world()
    if comm.Get_size() < 2:
        pytest.skip("needs 2 or more ranks")
    c = resolve(torch_pg(comm))
    with pytest.raises(pyddstore.DDStoreError, match="collective mismatch"):
        if c.rank == 0:
            c.allgather("x")                     # its lengths step: 8 bytes
        else:
            c.collective().agree(None, "agree")  # 4 int64: 32 bytes
    assert c.allgather(c.rank) == list(range(c.size))   # the group still works


def test_comm_file(monkeypatch):
    comm = world()
    require_method(1, comm)
    hs = shared_tmpdir(comm, "fc")
    env_set(monkeypatch, DDSTORE_COMM="file", SLURM_PROCID=comm.Get_rank(),
            SLURM_NTASKS=comm.Get_size(), SLURM_JOB_ID="42", SLURM_STEP_ID="0")
    ds = DistDataset(Source("tuple"), fresh_name("fc"), None, handshake_dir=hs)
    try:
        assert ds.comm.kind == "file" and ds.method == 1
        _check_items(comm, ds, lambda i: make_sample("tuple", i), N_ODD)
    finally:
        ds.free()


def test_method2_reader():
    """A DistDatasetReader reads what a method=2 DistDataset published (here
    in the same job: every rank is both the core job and a reader)."""
    comm = world()
    require_method(2, comm)
    from pyddstore.torch import DistDatasetReader
    hs = shared_tmpdir(comm, "m2")
    name = fresh_name("m2")
    ds = DistDataset(Source("dict"), name, comm, method=2, handshake_dir=hs)
    try:
        assert os.path.exists(os.path.join(hs, f"{name}.meta.json"))
        rd = DistDatasetReader(name, handshake_dir=hs)
        try:
            assert rd.shapes == ds.shapes
            assert rd.dtypes == ds.dtypes == {"x": "int64", "y": "float64", 3: "bool"}
            from pyddstore.torch import sampler_kwargs
            assert sampler_kwargs(rd) == sampler_kwargs(ds) == \
                {"num_replicas": comm.Get_size(), "rank": comm.Get_rank()}
            _check_items(comm, rd, lambda i: make_sample("dict", i), N_ODD)
        finally:
            rd.free()
    finally:
        ds.free()


def test_progress_bar_rules(monkeypatch):
    """tqdm on rank 0 only on a terminal, progress lines elsewhere (batch
    jobs), off with DDSTORE_PROGRESS=0."""
    import sys
    from pyddstore.torch.dataset import _LogProgress, _progress
    comm = world()
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    env_set(monkeypatch, DDSTORE_PROGRESS=None)
    bar = _progress(10, "x", 0)
    assert bar is not None
    bar.close()
    assert _progress(10, "x", 1) is None
    env_set(monkeypatch, DDSTORE_PROGRESS=0)
    assert _progress(10, "x", 0) is None
    env_set(monkeypatch, DDSTORE_PROGRESS=None)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    assert isinstance(_progress(10, "x", 0), _LogProgress)
    assert_all(comm, True)


@pytest.mark.parametrize("kind", ["torch", "file"])
def test_ddstore_width_without_mpi(kind, monkeypatch):
    """ddstore_width over a torch.distributed group and over a FileComm (method 1)."""
    comm = world()
    require_method(1, comm)
    hs = shared_tmpdir(comm, "wfc")
    if kind == "torch":
        torch_pg(comm)
        c = None
        env_set(monkeypatch, DDSTORE_COMM="torch")
    else:
        env_set(monkeypatch, DDSTORE_COMM="file", SLURM_PROCID=comm.Get_rank(),
                SLURM_NTASKS=comm.Get_size(), SLURM_JOB_ID="43", SLURM_STEP_ID="1")
        c = None
    width = 2 if comm.Get_size() >= 2 else 1
    ds = DistDataset(Source("dict"), fresh_name("wx"), c, ddstore_width=width,
                     handshake_dir=hs)
    try:
        assert ds.comm.kind == kind and ds.method == 1
        assert ds.ddstore.size == min(width, comm.Get_size() - (comm.Get_rank() // width) * width)
        _check_items(comm, ds, lambda i: make_sample("dict", i), N_ODD)
    finally:
        ds.free()


@pytest.mark.parametrize("kind", KINDS + RECORD_KINDS)
def test_meta_json_round_trip(kind, tmp_path):
    """The schema DistDatasetReader rebuilds from {name}.meta.json matches the
    core job's (method 2 itself is tested in test_method2_reader)."""
    import json
    from pyddstore.torch.dataset import _read_meta, _write_json_atomic
    from pyddstore.torch.schema import Schema
    comm = world()
    sch = Schema.of(make_sample(kind, 3))
    meta = {"format": "pyddstore.torch.meta", "version": 1, "name": "m", "n_core": 2,
            "total": 10, "schema": sch.describe(), "vars": [f"m/{i}" for i in range(len(sch.fields))]}
    _write_json_atomic(str(tmp_path / "m.meta.json"), meta)
    assert oct(os.stat(tmp_path / "m.meta.json").st_mode & 0o777) == "0o600"
    back = _read_meta(str(tmp_path), "m")
    rs = Schema.from_description(back["schema"], lambda i: back["vars"][i])
    assert json.loads(json.dumps(rs.describe())) == json.loads(json.dumps(sch.describe())) or \
        sch.structure == "namedtuple"
    assert [f.key for f in rs.fields] == [f.key for f in sch.fields]
    assert [f.var for f in rs.fields] == back["vars"]
    for a, b in zip(rs.fields, sch.fields):
        assert (a.kind, a.shape, a.dtype, a.rdtype, a.rclass) == \
            (b.kind, b.shape, b.dtype, b.rdtype, b.rclass)
    assert_all(comm, True)


def test_progress_lines_for_batch_jobs(monkeypatch):
    """stderr not a terminal (a batch job): rank 0 writes a progress line every
    few seconds and one when done; DDSTORE_PROGRESS=0 turns it off."""
    import io
    import sys
    from pyddstore.torch import dataset as dsm
    out = io.StringIO()
    p = dsm._LogProgress(1000, "train", interval=0.0, out=out)
    p.update(256)
    p.update(256)
    p.n = 1000
    p.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("ddstore: loading 'train' on rank 0: 26% (256/1000 samples")
    assert "ETA" in lines[0] and "samples/s" in lines[0]
    assert lines[-1].startswith("ddstore: loading 'train' on rank 0: loaded 1000 samples in")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    monkeypatch.setenv("DDSTORE_PROGRESS", "1")
    assert isinstance(dsm._progress(10, "x", 0), dsm._LogProgress)
    assert dsm._progress(10, "x", 1) is None                       # rank 0 only
    monkeypatch.setenv("DDSTORE_PROGRESS", "0")
    assert dsm._progress(10, "x", 0) is None


def _strided_sample(i):
    """A sample whose values are views (transposed, strided, Fortran order,
    negative strides, a byte offset) and edge values: the loading copies
    each one's bytes (samples.cpp) and must store exactly its values."""
    base = torch.arange(48, dtype=torch.float32).reshape(4, 12) * (i + 1)
    a = np.arange(24, dtype=np.int32).reshape(4, 6) * (i + 1)
    return {"t_T": base.t()[1:5],                       # transposed, offset
            "t_step": base[:, ::3],                     # strided
            "bf16": (base[0, :5] / 7).to(torch.bfloat16),
            "f16_nc": base.to(torch.float16)[::2, 1],
            "a_F": np.asfortranarray(a),
            "a_rev": a[::-1, ::-2],                     # negative strides
            "u8": np.arange(5, dtype=np.uint8)[::-1] + i,
            "npf": np.float32(-0.0) if i % 2 else np.float32(np.nan),
            "npb": np.bool_(i % 3 == 0),
            "i": -(2 ** 63) + i if i % 2 else 2 ** 63 - 1 - i,
            "f": float("-inf") if i % 2 else -0.0,
            "b": bool(i % 2)}


@pytest.mark.parametrize("pack", [False, True])
@pytest.mark.parametrize("chunk", [None, 3])
def test_load_copies_strided_values_exactly(pack, chunk):
    comm = world()
    ds = DistDataset(Source("dict", fn=_strided_sample), fresh_name("sv"), comm,
                     pack_fields=pack, chunk_size=chunk)
    try:
        _check_items(comm, ds, _strided_sample, N_ODD)
    finally:
        ds.free()


def _ragged_strided(i):
    e = torch.arange(2 * (i + 3), dtype=torch.int64).reshape(i + 3, 2).t()   # [2, e] view
    x = np.arange(3 * (i % 4 + 1), dtype=np.float64).reshape(3, -1).T[::-1]  # [n, 3] view
    return {"edge_index": e, "x": x, "y": torch.tensor([i], dtype=torch.float16)}


@pytest.mark.parametrize("pack", [False, True])
def test_ragged_load_copies_strided_values_exactly(pack):
    comm = world()
    ds = DistDataset(Source("dict", fn=_ragged_strided), fresh_name("rv"), comm,
                     ragged=True, pack_fields=pack)
    try:
        assert ds.ragged_fields == {"edge_index": 1, "x": 0}
        for i in range(N_ODD):
            w = same(ds[i], _ragged_strided(i), f"ds[{i}]")
            assert_all(comm, not w, w)
    finally:
        ds.free()


def test_int_too_large_for_int64():
    comm = world()
    _expect_all(comm, _remote_type(OverflowError),
                lambda: DistDataset(Source("x", fn=lambda i: (i, 2 ** 64 if i == 2 else 1)),
                                    fresh_name("ov"), comm), "too large")


def _big(i):
    """A 16 KiB sample: 6 of them make a batch the pool keeps (>= 64 KiB)."""
    return torch.full((64, 64), float(i)) + torch.arange(64.0)


def test_batch_pool_reuses_only_what_nothing_holds(monkeypatch):
    """The direct collate's host batches come from the batch pool
    (DDSTORE_BATCH_POOL_BYTES, batchpool.cpp): a batch's memory serves a
    later batch of the same size once nothing refers to it (the most
    recently freed first); a batch, or a view of one, still held is never
    written (its values stay); __getitems__'s batches likewise; a pooled
    storage resizes; batches under 64 KiB are not kept; 0 turns the pool
    off (every block freed)."""
    comm = world()
    env_set(monkeypatch, DDSTORE_BATCH_POOL_BYTES="64M")
    ds = DistDataset(Source("tensor", fn=_big), fresh_name("bp"), comm)
    small = DistDataset(Source("tensor"), fresh_name("bp"), comm)
    try:
        idx = [5, 1, 36, 1, 0, 20]
        want = torch.stack([_big(i) for i in idx])
        bad = []
        a = ds._collate(idx)
        ptr, view = a.data_ptr(), a[2]    # the view keeps a's memory
        del a
        held = [ds._collate(idx[::-1]) for _ in range(4)]    # same size
        if ptr in [h.data_ptr() for h in held]:
            bad.append("a held view's memory went to another batch")
        if same(view, want[2]):
            bad.append("a held view's values changed: " + same(view, want[2]))
        items = ds.__getitems__(idx)
        one = items[3]
        del items
        more = [ds.__getitems__(idx[::-1]) for _ in range(3)] + \
            [ds._collate(idx) for _ in range(3)]
        if same(one, want[3]):
            bad.append("a held sample of __getitems__ changed: " + same(one, want[3]))
        del view
        s0 = ext.batch_pool()
        b = ds._collate(idx)
        s1 = ext.batch_pool()
        if b.data_ptr() != ptr or s1["hits"] != s0["hits"] + 1:
            bad.append(f"the freed batch was not reused: {s0} -> {s1}")
        if same(b, want):
            bad.append("reused memory, wrong rows: " + same(b, want))
        b.resize_(3 * len(idx), 64, 64)      # a pooled storage grows
        if same(b[:len(idx)], want):
            bad.append("resize_ lost the rows: " + same(b[:len(idx)], want))
        del b, held, more, one
        s2 = ext.batch_pool()
        for _ in range(3):
            c = small._collate(idx)       # 288 B batches: torch's allocator
            del c
        s3 = ext.batch_pool()
        if (s3["hits"], s3["misses"], s3["kept"]) != (s2["hits"], s2["misses"], s2["kept"]):
            bad.append(f"batches under 64 KiB went through the pool: {s2} -> {s3}")
        env_set(monkeypatch, DDSTORE_BATCH_POOL_BYTES=0)
        off = DistDataset(Source("tensor", fn=_big), fresh_name("bp"), comm)   # sets the cap
        s4 = ext.batch_pool()
        for _ in range(3):
            c = off._collate(idx)
            del c
        s5 = ext.batch_pool()
        off.free()
        if s4["free_bytes"] != 0 or s5["hits"] != s4["hits"] or s5["kept"] != s4["kept"]:
            bad.append(f"DDSTORE_BATCH_POOL_BYTES=0 kept blocks: {s4} -> {s5}")
        assert_all(comm, not bad, "; ".join(bad))
    finally:
        small.free()
        ds.free()
