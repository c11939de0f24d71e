"""DistDataset over variable-size samples (ragged fields): items, packed and
padded batches equal the source for methods 0/1/2, width groups, the readers
and loaders; torch_geometric Data in, Batch out; BudgetBatchSampler; and
every bad input an error on every rank.

Run: tools/ddrun -n 4 -- .venv/bin/python ci/pytest_rank.py -q python/tests/test_torch_ragged.py
"""
import json
import os
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import pyddstore  # noqa: E402
from _torch_util import (N_ODD, Source, assert_all, fresh_name, require_method,  # noqa: E402
                         same, shared_tmpdir, world)
from pyddstore.torch import (BudgetBatchSampler, DistDataset, Packed, Padded,  # noqa: E402
                             ThreadDataLoader)
from test_torch_dataset import _expect_all  # noqa: E402  (errors on every rank)

F = 5


def _nodes(i):
    return (i * 7) % 12            # 0 .. 11 nodes (some samples empty)


def _edges(i):
    return (i * 5) % 9             # 0 .. 8 edges


def graph(i):
    """A HydraGNN-shaped sample: node features, positions, edges, a fixed target."""
    g = torch.Generator().manual_seed(500 + i)
    n, e = _nodes(i), _edges(i)
    return {"x": torch.rand((n, F), generator=g),
            "pos": torch.rand((n, 3), generator=g, dtype=torch.float64),
            "edge_index": torch.randint(0, max(n, 1), (2, e), generator=g),
            "y": torch.tensor([float(i)], dtype=torch.float32)}


def mixed(i):
    """A tuple: a ragged ndarray along axis 1, a bfloat16 ragged tensor, an int."""
    return (np.arange(3 * (i % 4 + 1), dtype=np.int32).reshape(3, i % 4 + 1) - i,
            (torch.arange(2 * (i % 5), dtype=torch.float32) / 8).reshape(-1, 2)
            .to(torch.bfloat16), i)


def _make(fn, comm, method=0, n=N_ODD, **kw):
    if method != 0:
        require_method(method, comm)
        kw.setdefault("handshake_dir", shared_tmpdir(comm, "rg"))
    kw.setdefault("ragged", True)
    return DistDataset(Source("x", n=n, fn=fn), fresh_name("rg"), comm, method=method, **kw)


def _expected_field(values, axis, form):
    """The packed or padded form of one field's per-sample values."""
    ts = [torch.as_tensor(v) for v in values]
    lengths = torch.tensor([t.shape[axis] for t in ts], dtype=torch.int64)
    if form == "packed":
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lengths, 0)])
        batch = torch.repeat_interleave(torch.arange(len(ts)), lengths)
        return Packed(torch.cat(ts, axis), lengths, offsets, batch)
    mx = int(lengths.max()) if len(ts) else 0
    padded = []
    for t in ts:
        pad = list(t.shape)
        pad[axis] = mx - t.shape[axis]
        padded.append(torch.cat([t, t.new_zeros(pad)], axis))
    mask = torch.arange(mx)[None, :] < lengths[:, None]
    return Padded(torch.stack(padded), lengths, mask)


def _expected_batch(fn, idx, axes, form):
    samples = [fn(i) for i in idx]
    first = samples[0]
    if not isinstance(first, (dict, tuple, list)):     # a single value
        return _expected_field(samples, axes[0], form) if 0 in axes else \
            torch.utils.data.default_collate(samples)
    keys = list(first.keys()) if isinstance(first, dict) else list(range(len(first)))
    out = {}
    for k in keys:
        vals = [s[k] for s in samples]
        if k in axes:
            out[k] = _expected_field(vals, axes[k], form)
        else:
            out[k] = torch.utils.data.default_collate(vals)
    return out if isinstance(first, dict) else [out[k] for k in keys]


def _check(comm, ds, fn, axes, form):
    """Every item, a batch with repeats (__getitems__, collate_fn, read_rows
    and the direct collate) equal the source."""
    bad = ""
    for i in range(len(ds)):
        bad = same(ds[i], fn(i), f"ds[{i}]")
        if bad:
            break
    rng = np.random.default_rng(11 + comm.Get_rank())
    idx = rng.integers(0, len(ds), 9).tolist() + [len(ds) - 1, 0, 0]
    want = _expected_batch(fn, idx, axes, form)
    if not bad:
        got = ds.__getitems__(idx)
        for i, g in zip(idx, got):
            bad = same(g, fn(i), f"__getitems__[{i}]")
            if bad:
                break
    if not bad:
        bad = same(ds.collate_fn(ds.__getitems__(idx)), want, "collate_fn")
    if not bad:
        bad = same(ds.collate_fn([ds[i] for i in idx]), want, "collate_fn(samples)")
    if not bad:
        bad = same(ds._collate(idx), want, "_collate")
    if not bad and isinstance(want, dict):
        rows = ds.read_rows(idx)
        bad = same(rows, want, "read_rows")
    assert_all(comm, not bad, bad)


@pytest.mark.parametrize("method", [0, 1, 2])
@pytest.mark.parametrize("form", ["packed", "padded"])
def test_graphs_equal_source(method, form):
    comm = world()
    ds = _make(graph, comm, method, ragged_batch=form)
    try:
        assert ds.ragged_fields == {"x": 0, "pos": 0, "edge_index": 1}
        assert ds.shapes == {"x": (-1, F), "pos": (-1, 3), "edge_index": (2, -1), "y": (1,)}
        assert ds.ragged_batch == form
        _check(comm, ds, graph, ds.ragged_fields, form)
        sz = ds.sizes("x", [0, 1, 2, len(ds) - 1])
        assert sz.dtype == np.int64
        assert sz.tolist() == [_nodes(i) for i in (0, 1, 2, len(ds) - 1)]
        assert ds.sizes("edge_index").tolist() == [_edges(i) for i in range(len(ds))]
    finally:
        ds.free()


@pytest.mark.parametrize("form", ["packed", "padded"])
def test_tuple_ndarray_bfloat16(form):
    """A ragged ndarray field along axis 1, a bfloat16 tensor field, a fixed int."""
    comm = world()
    ds = _make(mixed, comm, ragged_batch=form)
    try:
        assert ds.ragged_fields == {0: 1, 1: 0}
        _check(comm, ds, mixed, {0: 1, 1: 0}, form)
    finally:
        ds.free()


def test_declared_axes_and_fixed_fields():
    """ragged={key: axis}: that field ragged even where it never varies; the
    others fixed (and a fixed field that varies is the usual error)."""
    comm = world()

    def fn(i):
        return {"a": torch.full((4, 2), float(i)), "b": torch.arange(i % 3 + 1)}
    ds = _make(fn, comm, ragged={"a": 0, "b": None})
    try:
        assert ds.ragged_fields == {"a": 0, "b": 0}
        _check(comm, ds, fn, {"a": 0, "b": 0}, "packed")
    finally:
        ds.free()


@pytest.mark.parametrize("case", ["last_sample", "ranks_differ"])
def test_varying_somewhere_is_ragged_everywhere(case):
    """Only the last rank's last sample varies, or every rank's samples are
    alike but the ranks' shapes differ: every rank stores the field ragged."""
    comm = world()
    if case == "ranks_differ" and comm.Get_size() == 1:
        pytest.skip("needs 2 ranks")
    last, half = N_ODD - 1, N_ODD // 2

    def fn(i):
        if case == "last_sample":
            return torch.full((3 if i != last else 5, 2), float(i))
        return torch.full((2 if i < half else 3, 4), float(i))
    ds = _make(fn, comm)
    try:
        assert ds.ragged_fields == {0: 0}
        _check(comm, ds, fn, {0: 0}, "packed")
    finally:
        ds.free()


def test_ddstore_width():
    comm = world()
    width = 2 if comm.Get_size() >= 2 else 1
    ds = _make(graph, comm, ddstore_width=width)
    try:
        _check(comm, ds, graph, ds.ragged_fields, "packed")
    finally:
        ds.free()


@pytest.mark.parametrize("form", ["packed", "padded"])
def test_method2_reader(form):
    comm = world()
    require_method(2, comm)
    from pyddstore.torch import DistDatasetReader
    hs = shared_tmpdir(comm, "rg2")
    ds = _make(graph, comm, 2, handshake_dir=hs)
    try:
        meta = json.load(open(os.path.join(hs, f"{ds.name}.meta.json")))
        assert meta["version"] == 3
        assert {f["key"]: f.get("axis") for f in meta["schema"]["fields"]} == \
            {"x": 0, "pos": 0, "edge_index": 1, "y": None}
        rd = DistDatasetReader(ds.name, handshake_dir=hs, ragged_batch=form)
        try:
            assert rd.shapes == ds.shapes and rd.ragged_fields == ds.ragged_fields
            assert rd.sizes("edge_index").tolist() == [_edges(i) for i in range(len(rd))]
            _check(comm, rd, graph, rd.ragged_fields, form)
        finally:
            rd.free()
    finally:
        ds.free()


@pytest.mark.parametrize("loader", ["thread", "thread-slow", "torch", "torch-fork"])
@pytest.mark.parametrize("form", ["packed", "padded"])
def test_loaders(loader, form, monkeypatch):
    """ThreadDataLoader (direct collate, and DDSTORE_FAST_COLLATE=0) and
    torch's DataLoader with collate_fn=ds.collate_fn: every batch equals the
    source's."""
    comm = world()
    if loader == "thread-slow":
        monkeypatch.setenv("DDSTORE_FAST_COLLATE", "0")
    ds = _make(graph, comm, ragged_batch=form)
    try:
        sampler = torch.utils.data.BatchSampler(range(len(ds)), 6, drop_last=False)
        if loader.startswith("torch"):
            # torch-fork: forked workers (method 0: this node's shared memory)
            dl = torch.utils.data.DataLoader(ds, batch_sampler=sampler,
                                             collate_fn=ds.collate_fn,
                                             num_workers=2 if loader == "torch-fork" else 0)
        else:
            dl = ThreadDataLoader(ds, batch_sampler=sampler, num_workers=2)
        bad = ""
        for idx, batch in zip(list(sampler), dl):
            bad = same(batch, _expected_batch(graph, idx, ds.ragged_fields, form))
            if bad:
                break
        if not loader.startswith("torch"):
            dl.close()
        assert_all(comm, not bad, bad)
    finally:
        ds.free()


# ------------------------------------------------------------ bad input --
@pytest.mark.parametrize("case,exc,match", [
    ("two_axes", ValueError, "axes 0 and 1"),
    ("dtype", ValueError, "differs"),
    ("ndim", ValueError, "dims"),
    ("record", ValueError, "record"),
    ("declared_scalar", ValueError, "cannot be ragged"),
    ("declared_axis", ValueError, "declared ragged along axis 1"),
    ("trailing_across_ranks", ValueError, "axes 0 and 1"),
])
def test_bad_samples(case, exc, match):
    """Each bad input: a clear error on every rank (the last rank's last
    sample is the bad one, or the second half of the ranks differ)."""
    comm = world()
    last = N_ODD - 1
    kw = {}
    rec = np.dtype([("a", "<i4")])

    def fn(i):
        n = i % 3 + 1
        if case == "two_axes":
            return torch.zeros((n, 2) if i != last else (n + 1, 3))
        if case == "dtype":
            return torch.zeros(n, dtype=torch.float32 if i != last else torch.float64)
        if case == "ndim":
            return torch.zeros((n, 2) if i != last else (n,))
        if case == "record":
            return np.zeros(n, dtype=rec)
        if case == "declared_scalar":
            return (torch.zeros(n), i)
        if case == "declared_axis":
            return torch.zeros((n, 2))
        if case == "trailing_across_ranks":
            big = comm.Get_size() > 1 and i >= N_ODD // 2
            return torch.zeros((n, 4 if big else 2))
    if case == "declared_scalar":
        kw["ragged"] = {0: None, 1: 0}
    if case == "declared_axis":
        kw["ragged"] = {0: 1}
    if case == "trailing_across_ranks" and comm.Get_size() == 1:
        pytest.skip("needs 2 ranks")
    _expect_all(comm, (exc, RuntimeError), lambda: _make(fn, comm, **kw), match)
    # the job goes on: a good dataset after the error
    ds = _make(graph, comm)
    ds.free()


def test_bad_arguments():
    comm = world()
    _expect_all(comm, ValueError, lambda: _make(graph, comm, chunk_size=4), "chunk_size")
    _expect_all(comm, ValueError, lambda: _make(graph, comm, ragged_batch="ragged"),
                "ragged_batch")
    _expect_all(comm, (TypeError, RuntimeError), lambda: _make(graph, comm, ragged="x"),
                "ragged must be")
    _expect_all(comm, (ValueError, RuntimeError), lambda: _make(graph, comm,
                                                                ragged={"nope": 0}),
                "'nope'")
    # the default (ragged=False) keeps refusing shapes that vary, with a hint
    _expect_all(comm, (ValueError, RuntimeError), lambda: _make(graph, comm, ragged=False),
                "ragged=True")
    ds = _make(graph, comm)
    try:
        with pytest.raises(ValueError, match="fixed fields only"):
            ds.alloc(4)
        with pytest.raises(ValueError, match="ragged"):
            ds.read_rows([0], out={})
        with pytest.raises(ValueError, match="needs field="):
            ds.sizes()
        with pytest.raises(ValueError, match="not ragged"):
            ds.sizes("y")
        from pyddstore.torch import WindowedDataset
        with pytest.raises(ValueError, match="ragged"):
            WindowedDataset(ds, 2)
        w = WindowedDataset(ds, 2, fields=["y"])
        assert torch.equal(w[0]["y"], torch.tensor([[0.0], [1.0]]))
    finally:
        ds.free()


# ------------------------------------------------------- budget batching --
def test_budget_sampler_properties():
    """Cap respected (unless a single sample exceeds it), each index of the
    rank's share exactly once per epoch, equal steps on every rank,
    deterministic in (seed, epoch), shares disjoint and covering."""
    comm = world()
    ds = _make(graph, comm, n=61)
    try:
        budget = 14
        s = BudgetBatchSampler(ds, budget, field="x", seed=3)
        s2 = BudgetBatchSampler(ds, budget, field="x", seed=3)
        sizes = ds.sizes("x")
        shares = comm.allgather(sorted(s.indices.tolist()))
        allidx = sorted(i for sh in shares for i in sh)
        bad = "" if allidx == list(range(len(ds))) else f"shares cover {allidx}"
        orders = []
        for epoch in (0, 1):
            s.set_epoch(epoch)
            s2.set_epoch(epoch)
            bs = list(s)
            if len(bs) != len(s):
                bad = bad or f"{len(bs)} batches, len {len(s)}"
            if bs != list(s2):
                bad = bad or "not deterministic in (seed, epoch)"
            own = s.batches()
            for b in own:
                cost = int(sizes[b].sum())
                if cost > budget and len(b) > 1:
                    bad = bad or f"batch {b} costs {cost} > {budget}"
            flat = sorted(i for b in own for i in b)
            if flat != sorted(s.indices.tolist()):
                bad = bad or "an index missing or repeated in the epoch"
            if bs[:len(own)] != own[:len(bs)]:
                bad = bad or "the batches are not the rank's own"
            orders.append([i for b in own for i in b])
        steps = comm.allgather(len(s))
        if len(set(steps)) != 1:
            bad = bad or f"steps differ across ranks: {steps}"
        if len(s.indices) > 3 and orders[0] == orders[1]:
            bad = bad or "epochs 0 and 1 in the same order"
        s3 = BudgetBatchSampler(ds, budget, field=["x", "edge_index"], drop_last=True)
        steps3 = comm.allgather(len(s3))
        if len(set(steps3)) != 1 or steps3[0] != min(s3.counts):
            bad = bad or f"drop_last steps {steps3} counts {s3.counts}"
        for b in s3:
            cost = int(sizes[b].sum() + ds.sizes("edge_index", b).sum())
            if cost > budget and len(b) > 1:
                bad = bad or f"two-field batch {b} costs {cost}"
        assert_all(comm, not bad, bad)
    finally:
        ds.free()


def test_budget_smaller_than_a_sample():
    """A sample larger than the budget: a batch of its own, a warning."""
    comm = world()
    ds = _make(graph, comm)
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            s = BudgetBatchSampler(ds, 3, field="x", shuffle=False)
        sizes = ds.sizes("x")
        big = [i for i in s.indices.tolist() if sizes[i] > 3]
        ok = (not big or any("exceed the budget" in str(x.message) for x in w))
        for b in s.batches():
            if len(b) > 1 and int(sizes[b].sum()) > 3:
                ok = False
            if any(sizes[i] > 3 for i in b) and len(b) != 1:
                ok = False
        assert_all(comm, ok, "oversized samples not alone / no warning")
        with pytest.raises(ValueError, match="budget"):
            BudgetBatchSampler(ds, 0, field="x")
        with pytest.raises(ValueError, match="not ragged"):
            BudgetBatchSampler(ds, 10, field="y")
    finally:
        ds.free()


@pytest.mark.parametrize("loader", ["thread", "torch"])
def test_budget_sampler_with_loaders(loader):
    comm = world()
    ds = _make(graph, comm)
    try:
        s = BudgetBatchSampler(ds, 20, field="x", seed=1)
        if loader == "torch":
            dl = torch.utils.data.DataLoader(ds, batch_sampler=s, collate_fn=ds.collate_fn)
        else:
            dl = ThreadDataLoader(ds, batch_sampler=s, num_workers=2)
        bad = ""
        n = 0
        for idx, batch in zip(list(s), dl):
            n += 1
            bad = same(batch, _expected_batch(graph, idx, ds.ragged_fields, "packed"))
            if not bad and int(batch["x"].lengths.sum()) > 20 and len(idx) > 1:
                bad = "over budget"
            if bad:
                break
        if not bad and n != len(s):
            bad = f"{n} batches, len(sampler) {len(s)}"
        if loader != "torch":
            dl.close()
        assert_all(comm, not bad, bad)
    finally:
        ds.free()


# -------------------------------------------------------- torch_geometric --
def test_torch_geometric_batch():
    """Data samples in, a Batch out equal to Batch.from_data_list's."""
    comm = world()
    try:
        from torch_geometric.data import Batch, Data
    except ImportError as e:
        pytest.skip(f"SKIP: torch_geometric is not installed ({e}); ./ddstore setup "
                    "installs it")

    def fn(i):
        g = graph(i)
        return Data(x=g["x"], pos=g["pos"], edge_index=g["edge_index"], y=g["y"])
    ds = _make(fn, comm, ragged=False)       # Data samples: ragged by torch_geometric's rules
    try:
        assert ds.ragged_fields == {"x": 0, "pos": 0, "edge_index": 1}
        bad = ""
        d = ds[3]
        if not isinstance(d, Data):
            bad = f"ds[3] is a {type(d).__name__}"
        idx = [5, 0, 3, 3, len(ds) - 1, 12]
        want = Batch.from_data_list([fn(i) for i in idx])
        for got in (ds._collate(idx), ds.collate_fn(ds.__getitems__(idx))):
            if bad:
                break
            if not isinstance(got, Batch):
                bad = f"a {type(got).__name__}, not a Batch"
                break
            for key in ("x", "pos", "edge_index", "y", "batch", "ptr"):
                w = same(got[key], want[key], key)
                if w:
                    bad = w
                    break
            if not bad and got.num_graphs != want.num_graphs:
                bad = "num_graphs"
            if not bad:
                for k, (a, b) in enumerate(zip(got.to_data_list(), want.to_data_list())):
                    for key in ("x", "edge_index", "y"):
                        w = same(a[key], b[key], f"to_data_list[{k}].{key}")
                        bad = bad or w
        assert_all(comm, not bad, bad)
    finally:
        ds.free()


# ------------------------------------------------------------- meta file --
def test_meta_version3_round_trip_and_damage():
    """The meta file's ragged fields (format version 3): parsed back with
    their axes; a damaged axis is a ValueError naming the file and 'schema'."""
    from pyddstore.torch.dataset import _parse_meta
    from pyddstore.torch.schema import Field, Schema
    comm = world()
    sch = Schema("dict", [Field("x", "tensor", (-1, 5), "float32", axis=0),
                          Field("e", "ndarray", (2, -1), "int64", axis=1),
                          Field("y", "float", (), "float64")])
    meta = {"format": "pyddstore.torch.meta", "version": 3, "name": "m", "n_core": 2,
            "total": 10, "exchange_ns": "", "run_id": "0123456789abcdef",
            "generation": [1, 2, 3], "schema": sch.describe(), "vars": ["m/0", "m/1", "m/2"]}
    _, back = _parse_meta("m.meta.json", json.dumps(meta).encode(), "m")
    assert [(f.key, f.axis, f.shape, f.row_shape) for f in back.fields] == \
        [("x", 0, (-1, 5), (5,)), ("e", 1, (2, -1), (2,)), ("y", None, (), ())]
    for bad in ("0", -1, 2, 1.0):
        m = json.loads(json.dumps(meta))
        m["schema"]["fields"][0]["axis"] = bad
        with pytest.raises(ValueError, match="'schema'"):
            _parse_meta("m.meta.json", json.dumps(m).encode(), "m")
    m = json.loads(json.dumps(meta))
    m["schema"]["fields"][2]["axis"] = 0             # a float field cannot be ragged
    with pytest.raises(ValueError, match="'schema'"):
        _parse_meta("m.meta.json", json.dumps(m).encode(), "m")
    m["version"] = 4
    with pytest.raises(ValueError, match="version"):
        _parse_meta("m.meta.json", json.dumps(m).encode(), "m")
    assert_all(comm, True)


def test_ragged_collate_guesses():
    """The extension's packed read: sizes first (guess -1), a short guess
    (DDS_ENOSPC, reallocated, read again), a generous one (a view of the
    first rows): the same values, lengths, offsets and batch vector."""
    from pyddstore.torch._ext import ext
    comm = world()
    ds = _make(graph, comm)
    try:
        f = ds.schema.field("x")
        idx = torch.tensor([4, 0, 9, 9, len(ds) - 1, 1], dtype=torch.int64)
        want = _expected_field([graph(i)["x"] for i in idx.tolist()], 0, "packed")
        bad = ""
        for guess in (-1, 0, 1, 10_000):
            got = Packed(*ext.ragged_collate(ds.ddstore, f.var, list(f.row_shape), f.dtype,
                                             idx, guess))
            bad = bad or same(got, want, f"guess {guess}")
        got = Packed(*ext.ragged_collate(ds.ddstore, f.var, [5], "float32",
                                         torch.zeros(0, dtype=torch.int64), -1))
        if got.values.shape != (0, 5) or got.offsets.tolist() != [0]:
            bad = bad or f"empty batch: {got}"
        with pytest.raises(ValueError):        # core checks the row width against the variable
            ext.ragged_collate(ds.ddstore, f.var, [4], "float32", idx, -1)
        with pytest.raises(IndexError):
            ext.ragged_collate(ds.ddstore, f.var, [5], "float32", [len(ds)], -1)
        assert_all(comm, not bad, bad)
    finally:
        ds.free()
