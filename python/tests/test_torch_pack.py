"""DistDataset(pack_fields=True): the fixed fields of a sample in one row of
one variable.  Values equal the per-field dataset's (and the source's) for
every sample kind and dtype, methods 0 and 1 (and 2), chunked and ragged
loading; a batch is one planned read (get_profile: calls and reads per batch
smaller by the number of fields); ThreadDataLoader, forked DataLoader
workers, alloc()/out=, resume, the method-2 reader (layout in the meta
file, mismatches refused); bad input refused on every rank.

Run: tools/ddrun -n 2 -- .venv/bin/python -m pytest -q python/tests/test_torch_pack.py
"""
import json
import os
import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _torch_util import (KINDS, N_ODD, RECORD_KINDS, Source, assert_all,  # noqa: E402
                         env_set, fresh_name, make_sample, require_method, same,
                         shared_tmpdir, world)
from pyddstore.torch import (DistDataset, DistSampler, ThreadDataLoader,  # noqa: E402
                             WindowedDataset)
from torch.utils.data import DataLoader, default_collate  # noqa: E402


def _make(src, name, comm, method=0, **kw):
    if method != 0:
        require_method(method, comm)
        kw.setdefault("handshake_dir", shared_tmpdir(comm, "pk"))
    return DistDataset(src, name, comm, method=method, **kw)


def _pair(kind, comm, method=0, **kw):
    """(packed, per-field) datasets of the same source."""
    a = _make(Source(kind), fresh_name("P" + kind), comm, method, pack_fields=True, **kw)
    try:
        b = _make(Source(kind), fresh_name("F" + kind), comm, method, **kw)
    except BaseException:
        a.free()
        raise
    return a, b


def _first_diff(comm, ds, ref, kind, n=N_ODD):
    """'' when ds's items, __getitems__, read_rows and direct collate equal
    ref's (a per-field dataset) and the source's; else the first difference."""
    for i in list(range(n)) + [-1]:
        w = same(ds[i], make_sample(kind, i % n), f"ds[{i}]") or same(ds[i], ref[i], f"ds[{i}]")
        if w:
            return w
    rng = np.random.default_rng(5 + comm.Get_rank())
    idx = rng.integers(0, n, 2 * n).tolist() + [n - 1, 0, 0]
    for i, g, r in zip(idx, ds.__getitems__(idx), ref.__getitems__(idx)):
        w = same(g, r, f"__getitems__[{i}]") or same(g, make_sample(kind, i), f"src[{i}]")
        if w:
            return w
    got, exp = ds.read_rows(idx), ref.read_rows(idx)
    for k in exp:
        a, b = got[k], exp[k]
        if isinstance(b, np.ndarray):
            if a.dtype != b.dtype or a.tobytes() != b.tobytes():
                return f"read_rows[{k!r}] differs"
        else:
            w = same(a, b, f"read_rows[{k!r}]")
            if w:
                return w
    got, exp = ds.read_rows([]), ref.read_rows([])
    for k in exp:
        if tuple(got[k].shape) != tuple(exp[k].shape) or got[k].dtype != exp[k].dtype:
            return f"read_rows([])[{k!r}]: {got[k].shape} vs {exp[k].shape}"
    if ds._fast_collate_ok():
        w = same(ds._collate(idx[:9]), default_collate([make_sample(kind, i) for i in idx[:9]]),
                 "direct collate")
        if w:
            return w
    return ""


@pytest.mark.parametrize("method", [0, 1])
@pytest.mark.parametrize("kind", KINDS + RECORD_KINDS)
def test_packed_equals_per_field(kind, method):
    """Every sample kind and dtype (bool, uint8, int32, int64, float16,
    bfloat16 bit-exact, float32, float64, records, Python numbers, numpy
    scalars, 0-d and n-d tensors)."""
    comm = world()
    ds, ref = _pair(kind, comm, method)
    try:
        assert ds.pack_fields and not ref.pack_fields
        assert ds.shapes == ref.shapes and ds.dtypes == ref.dtypes
        w = _first_diff(comm, ds, ref, kind)
        assert_all(comm, not w, w)
    finally:
        ds.free()
        ref.free()


@pytest.mark.parametrize("kind", ["dict", "half", "recdict"])
@pytest.mark.parametrize("chunk", [1, 4])
def test_packed_chunked(kind, chunk):
    comm = world()
    ds, ref = _pair(kind, comm, chunk_size=chunk)
    try:
        w = _first_diff(comm, ds, ref, kind)
        assert_all(comm, not w, w)
    finally:
        ds.free()
        ref.free()


def test_layout_aligns_fields():
    """Each field at an offset aligned to its element size, in sample order;
    the row a multiple of 8 bytes."""
    from pyddstore.torch.packing import layout_of
    from pyddstore.torch.schema import Schema
    s = {"b": True, "d": np.float64(1), "i": np.int32(2), "u": torch.zeros(3, dtype=torch.uint8),
         "h": torch.zeros(1, dtype=torch.float16), "q": np.zeros(2, dtype=np.int64)}
    sch = Schema.of(s)
    lay = layout_of("x", sch)
    offs = {f.key: f.offset for f in sch.fields}
    assert offs == {"b": 0, "d": 8, "i": 16, "u": 20, "h": 24, "q": 32}
    assert lay.row_bytes == 48 and all(f.var == "x/packed" for f in sch.fields)
    assert_all(world(), True)


@pytest.mark.parametrize("method", [0, 1])
def test_one_read_per_batch(method):
    """A batch of a packed dataset is one planned read (calls) and posts the
    remote reads of one field, where the per-field dataset posts them once
    per field."""
    comm = world()
    ds, ref = _pair("dict", comm, method)     # 3 fields
    try:
        nf = len(ref.fields)
        rng = np.random.default_rng(3)        # the same rows on every rank
        batches = [rng.integers(0, N_ODD, 12).tolist() for _ in range(5)]

        def cost(d, read):
            p0 = d.get_profile()
            for b in batches:
                read(d, b)
            p1 = d.get_profile()
            return p1["calls"] - p0["calls"], p1["reads"] - p0["reads"]

        bad = []
        for what, read in (("collate", lambda d, b: d._collate(b)),
                           ("__getitems__", lambda d, b: d.__getitems__(b)),
                           ("read_rows", lambda d, b: d.read_rows(b))):
            pc, pr = cost(ds, read)
            fc, fr = cost(ref, read)
            if pc != len(batches) or fc != nf * len(batches):
                bad.append(f"{what}: calls packed {pc}, per field {fc} for {len(batches)} "
                           f"batches of {nf} fields")
            if fr != nf * pr:
                bad.append(f"{what}: remote reads packed {pr}, per field {fr} ({nf} fields)")
            if comm.Get_size() > 1 and method == 1 and pr == 0:
                bad.append(f"{what}: no remote read counted on {comm.Get_size()} ranks")
        assert_all(comm, not bad, "; ".join(bad))
    finally:
        ds.free()
        ref.free()


def test_profile_of_a_packed_field():
    """get_profile(field) of a packed field is the packed variable's; the sum
    counts it once; rows delivered are counted per batch row."""
    comm = world()
    ds = _make(Source("dict"), fresh_name("Pp"), comm, pack_fields=True)
    try:
        p0 = ds.get_profile()
        ds.read_rows([0, 1, 2])
        p1, px = ds.get_profile(), ds.get_profile("x")
        ok = p1["rows"] - p0["rows"] == 3 and p1["calls"] - p0["calls"] == 1 and \
            px == ds.get_profile(3)
        assert_all(comm, ok, f"{p0} {p1} {px}")
    finally:
        ds.free()


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("reuse", [False, True])
@pytest.mark.parametrize("fast", [1, 0])
def test_thread_loader(workers, reuse, fast, monkeypatch):
    comm = world()
    env_set(monkeypatch, DDSTORE_FAST_COLLATE=fast)
    for kind in ("dict", "half", "namedtuple"):
        ds = _make(Source(kind), fresh_name("Pt"), comm, pack_fields=True)
        try:
            ref = list(DataLoader(Source(kind), batch_size=5, shuffle=True,
                                  generator=torch.Generator().manual_seed(11)))
            got = list(ThreadDataLoader(ds, batch_size=5, shuffle=True, num_workers=workers,
                                        reuse_buffers=reuse,
                                        generator=torch.Generator().manual_seed(11)))
            w = "" if len(ref) == len(got) else f"{len(got)} batches, {len(ref)} expected"
            for k, (a, b) in enumerate(zip(ref, got)):
                w = w or same(b, a, f"{kind} batch {k}")
            assert_all(comm, not w, w)
        finally:
            ds.free()


def test_epoch_report_counts_reads_per_batch():
    """The loader's epoch report shows planned and remote reads per batch:
    1 planned read per batch packed, one per field otherwise."""
    from pyddstore.torch.report import summary
    comm = world()
    ds, ref = _pair("dict", comm)
    try:
        figs = {}
        for d in (ds, ref):
            lo = ThreadDataLoader(d, batch_size=6, num_workers=1)
            for _ in lo:
                pass
            figs[d.name] = lo.epoch_report()
            lo.close()
        a, b = figs[ds.name]["read"], figs[ref.name]["read"]
        ok = a["calls_per_batch"] == 1 and b["calls_per_batch"] == len(ref.fields) and \
            b["reads_per_batch"] == len(ref.fields) * a["reads_per_batch"] and \
            "1.0 planned reads" in summary(figs[ds.name])
        assert_all(comm, ok, f"{a} {b}")
    finally:
        ds.free()
        ref.free()


@pytest.mark.parametrize("persistent", [False, True])
def test_forked_dataloader_workers(persistent):
    """torch DataLoader with forked workers over a method-0 packed dataset:
    batches equal the source's, and the parent's profile counts the
    workers' reads (one call per batch)."""
    comm = world()
    ds = _make(Source("dict"), fresh_name("Pf"), comm, pack_fields=True)
    try:
        rs = torch.utils.data.RandomSampler
        p0 = ds.get_profile()
        lo = DataLoader(ds, batch_size=4, num_workers=2, persistent_workers=persistent,
                        sampler=rs(ds, generator=torch.Generator().manual_seed(5)),
                        multiprocessing_context="fork")
        ref = DataLoader(Source("dict"), batch_size=4,
                         sampler=rs(Source("dict"), generator=torch.Generator().manual_seed(5)))
        w = ""
        nb = 0
        for epoch in range(2):
            for k, (a, b) in enumerate(zip(ref, lo)):
                w = w or same(b, a, f"epoch {epoch} batch {k}")
                nb += 1
        del lo
        p1 = ds.get_profile()
        if not w and p1["calls"] - p0["calls"] != nb:
            w = f"calls {p1['calls'] - p0['calls']} for {nb} batches"
        if not w and p1["rows"] - p0["rows"] != 2 * N_ODD:
            w = f"rows {p1['rows'] - p0['rows']} for {2 * N_ODD} samples"
        assert_all(comm, not w, w)
    finally:
        ds.free()


def test_alloc_and_out():
    """alloc() buffers (the packed row buffer registered behind them) and
    out= reads: values equal, views into the buffers; release() works."""
    comm = world()
    ds, ref = _pair("recdict", comm)
    try:
        bufs = ds.alloc(8)
        rows = [5, 1, 1, N_ODD - 1]
        got = ds.read_rows(rows, out=bufs)
        exp = ref.read_rows(rows)
        w = same(got["t"], exp["t"], "t") or \
            ("" if got["r"].tobytes() == exp["r"].tobytes() else "r differs")
        if not w and got["t"].data_ptr() != bufs["t"].data_ptr():
            w = "read_rows(out=) did not write into the buffer"
        sub = ds.alloc(4, fields=["t"])         # a subset of the fields
        w = w or same(ds.read_rows(rows, fields=["t"], out=sub)["t"], exp["t"], "subset")
        ds.release(sub)
        ds.release(bufs)
        with pytest.raises(ValueError, match="not registered"):
            ds.release(bufs)
        assert_all(comm, not w, w)
    finally:
        ds.free()
        ref.free()


def test_windowed_over_packed():
    comm = world()
    ds, ref = _pair("tuple", comm)
    try:
        a, b = WindowedDataset(ds, 3, stride=2), WindowedDataset(ref, 3, stride=2)
        w = same(a.__getitems__([0, 4, 2]), b.__getitems__([0, 4, 2]), "windows") or \
            same(a[1], b[1], "window 1")
        assert_all(comm, not w, w)
    finally:
        ds.free()
        ref.free()


def test_ragged_fields_beside_the_row():
    """Ragged fields keep their own variables: the fixed ones share the row."""
    comm = world()

    def sample(i):
        return {"pos": torch.arange(3 * (i % 4 + 1), dtype=torch.float32).reshape(-1, 3) + i,
                "y": torch.tensor([i * 0.5], dtype=torch.float64), "n": np.int32(i % 4 + 1),
                "z": torch.full((i % 3 + 1,), i, dtype=torch.int64)}

    a = _make(Source("x", fn=sample), fresh_name("Pr"), comm, pack_fields=True, ragged=True)
    b = _make(Source("x", fn=sample), fresh_name("Fr"), comm, ragged=True)
    try:
        vs = {f.key: f.var for f in a.schema.fields}
        ok = vs["y"] == vs["n"] == f"{a.name}/packed" and len(set(vs.values())) == 3
        assert ok and a.pack_fields, vs
        assert a.ragged_fields == b.ragged_fields == {"pos": 0, "z": 0}
        idx = [3, 0, 7, 7, 20]
        w = ""
        for i in idx:
            w = w or same(a[i], b[i], f"ds[{i}]")
        ca, cb = a._collate(idx), b._collate(idx)
        for k in ("pos", "z"):
            w = w or same(ca[k].values, cb[k].values, f"collate {k}")
        w = w or same(ca["y"], cb["y"], "collate y") or same(ca["n"], cb["n"], "collate n")
        got = list(ThreadDataLoader(a, batch_size=4, num_workers=1))
        w = w or ("" if len(got) == (N_ODD + 3) // 4 else f"{len(got)} batches")
        assert_all(comm, not w, w)
    finally:
        a.free()
        b.free()


def test_all_fields_ragged_nothing_to_pack():
    comm = world()
    ds = _make(Source("x", fn=lambda i: torch.arange(i % 5 + 1, dtype=torch.float32)),
               fresh_name("Pn"), comm, pack_fields=True, ragged=True)
    try:
        ok = not ds.pack_fields and ds.ragged_fields == {0: 0} and \
            torch.equal(ds[7], torch.arange(3, dtype=torch.float32))
        assert_all(comm, ok, f"{ds.pack_fields} {ds.ragged_fields}")
    finally:
        ds.free()


@pytest.mark.parametrize("workers", [0, 2])
def test_resume(workers):
    """state_dict() after k batches and a new loader resume to exactly the
    uninterrupted epoch on a packed dataset."""
    comm = world()
    ds = _make(Source("dict", n=41), fresh_name("Ps"), comm, pack_fields=True)

    def ids(b):
        return b["x"][:, 0].tolist()

    try:
        s = DistSampler(ds, seed=3)
        s.set_epoch(1)
        lo = ThreadDataLoader(ds, batch_size=3, sampler=s, num_workers=workers)
        ref = [ids(b) for b in lo]
        lo.close()
        s1 = DistSampler(ds, seed=3)
        s1.set_epoch(1)
        lo1 = ThreadDataLoader(ds, batch_size=3, sampler=s1, num_workers=workers)
        it = iter(lo1)
        got = [ids(next(it)) for _ in range(2)]
        state = pickle.loads(pickle.dumps(lo1.state_dict()))
        it.close()
        lo1.close()
        s2 = DistSampler(ds, seed=3)
        lo2 = ThreadDataLoader(ds, batch_size=3, sampler=s2, num_workers=workers)
        lo2.load_state_dict(state)
        s2.set_epoch(1)
        rest = [ids(b) for b in lo2]
        lo2.close()
        assert_all(comm, got + rest == ref, f"{got} + {rest} != {ref}")
    finally:
        ds.free()


# ------------------------------------------------------------ method 2 --
def test_method2_reader_reads_the_layout():
    """A DistDatasetReader learns the packed layout from the meta file and
    reads what the core job stored; pack_fields=False against a packed core
    job (and True against a per-field one) is a clear ValueError."""
    comm = world()
    require_method(2, comm)
    from pyddstore.torch import DistDatasetReader
    hs = shared_tmpdir(comm, "pk2")
    name, plain = fresh_name("P2"), fresh_name("F2")
    ds = DistDataset(Source("half"), name, comm, method=2, handshake_dir=hs,
                     pack_fields=True)
    fd = DistDataset(Source("tuple"), plain, comm, method=2, handshake_dir=hs)
    try:
        with open(os.path.join(hs, f"{name}.meta.json")) as fh:
            meta = json.load(fh)
        assert meta["version"] == 4 and meta["vars"] == [f"{name}/packed"]
        assert meta["packed"] == {"var": f"{name}/packed", "row_bytes": ds._pack.row_bytes}
        rd = DistDatasetReader(name, handshake_dir=hs)
        try:
            assert rd.pack_fields and rd.shapes == ds.shapes
            w = ""
            for i in range(N_ODD):
                w = w or same(rd[i], ds[i], f"reader[{i}]")
            w = w or same(rd._collate([4, 2, 2]), ds._collate([4, 2, 2]), "collate")
            got = list(ThreadDataLoader(rd, batch_size=6, num_workers=2))
            w = w or ("" if sum(len(b["h"]) for b in got) == N_ODD else "loader lost rows")
            assert_all(comm, not w, w)
        finally:
            rd.free()
        with pytest.raises(ValueError, match="pack_fields=False.*packed"):
            DistDatasetReader(name, handshake_dir=hs, pack_fields=False)
        with pytest.raises(ValueError, match="pack_fields=True.*one variable per field"):
            DistDatasetReader(plain, handshake_dir=hs, pack_fields=True)
        rd = DistDatasetReader(plain, handshake_dir=hs, pack_fields=False)
        rd.free()
        # a layout whose row is not the stored variable's: refused at the join
        comm.Barrier()
        if comm.Get_rank() == 0:
            from pyddstore.torch.metafile import write_json_atomic
            meta["packed"]["row_bytes"] += 8
            os.unlink(os.path.join(hs, f"{name}.meta.json"))
            write_json_atomic(os.path.join(hs, f"{name}.meta.json"), meta)
        comm.Barrier()
        with pytest.raises(ValueError, match="does not match the stored variable"):
            DistDatasetReader(name, handshake_dir=hs)
        assert_all(comm, True)
    finally:
        ds.free()
        fd.free()


def test_meta_layout_checks(tmp_path):
    """A damaged packed layout in a meta file is a ValueError naming the file
    and the field, never a wrong row."""
    from pyddstore.torch.dataset import _parse_meta
    from pyddstore.torch.packing import layout_of
    from pyddstore.torch.schema import Schema
    sch = Schema.of(make_sample("recdict", 1))
    lay = layout_of("m", sch)
    good = {"format": "pyddstore.torch.meta", "version": 4, "name": "m", "n_core": 1,
            "total": 3, "exchange_ns": "", "run_id": "0" * 15 + "1", "generation": [1],
            "schema": sch.describe(), "vars": ["m/packed"], "packed": lay.describe()}
    meta, back = _parse_meta("p", json.dumps(good).encode(), "m")
    assert [f.offset for f in back.fields] == [f.offset for f in sch.fields]

    def bad(change, match):
        m = json.loads(json.dumps(good))
        change(m)
        with pytest.raises(ValueError, match=match):
            _parse_meta("p", json.dumps(m).encode(), "m")

    bad(lambda m: m.pop("packed"), "packed")
    bad(lambda m: m.__setitem__("version", 3), "packed")
    bad(lambda m: m["packed"].__setitem__("row_bytes", 8), "does not fit")
    bad(lambda m: m["schema"]["fields"][1].__setitem__("offset", 1), "does not fit")
    bad(lambda m: m["schema"]["fields"][1].__setitem__("offset", 0), "overlap")
    bad(lambda m: m["schema"]["fields"][1].pop("offset"), "vars|offset")
    bad(lambda m: m.__setitem__("vars", ["m/0"]), "packed variable")
    assert_all(world(), True)


# --------------------------------------------------------------- errors --
def test_bad_pack_fields_fails_every_rank():
    comm = world()
    with pytest.raises(TypeError, match="pack_fields"):
        DistDataset(Source("dict"), fresh_name("Pe"), comm,
                    pack_fields="yes" if comm.Get_rank() == 0 else True)
    assert_all(comm, True)


def test_extension_refuses_a_layout_that_overruns_the_row():
    """read_packed / Collator check every field against the row before
    reading: an offset past the row, or a tensor that does not fit, is a
    ValueError; a row width that is not the stored variable's is core's
    error (nothing read)."""
    import pyddstore
    from pyddstore.torch._ext import ext
    comm = world()
    ds = _make(Source("dict"), fresh_name("Pb"), comm, pack_fields=True)
    try:
        var, rb, offs = ds._pack.spec(ds.schema.fields)
        outs = [torch.empty(2, 2, dtype=torch.int64), torch.empty(2, dtype=torch.float64),
                torch.empty(2, 4, dtype=torch.bool)]
        with pytest.raises(ValueError, match="does not fit"):
            ext.read_packed(ds.ddstore, (var, rb, [offs[0], rb - 4, offs[2]]), outs, [0, 1])
        with pytest.raises(ValueError, match="outside its row"):
            ext.read_packed(ds.ddstore, (var, rb, [offs[0], rb + 8, offs[2]]), outs, [0, 1])
        with pytest.raises(ValueError, match="row"):    # a wrong row width
            ext.read_packed(ds.ddstore, (var, rb + 8, offs), outs, [0, 1])
        with pytest.raises(ValueError, match="row buffer"):
            ext.read_packed(ds.ddstore, (var, rb, offs), outs, [0, 1],
                            rowbuf=torch.empty(2, rb + 8, dtype=torch.uint8))
        ext.read_packed(ds.ddstore, (var, rb, offs), outs, [0, 1])
        w = same(outs[0], torch.stack([make_sample("dict", i)["x"] for i in (0, 1)]), "x")
        assert_all(comm, not w, w)
    finally:
        ds.free()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU on this machine")
def test_device_reads():
    comm = world()
    dev = torch.device("cuda", comm.Get_rank() % torch.cuda.device_count())
    ds, ref = _pair("dict", comm, device=dev)
    try:
        idx = [3, 1, 1, 0]
        w = same(ds._collate(idx), ref._collate(idx), "device collate") or \
            same(ds.read_rows(idx), ref.read_rows(idx), "device read_rows") or \
            same(ds[2], ref[2], "device item")
        assert_all(comm, not w, w)
    finally:
        ds.free()
        ref.free()


# ---------------------------------------------- the layout code in C++ --
# Meta files as DistDataset wrote them before the checks and the layout
# arithmetic moved to the torch extension (layout.cpp): they read back with
# the same fields, variables and offsets.
_META_V4 = (
    '{"format":"pyddstore.torch.meta","version":4,"name":"d","n_core":2,"total":9,'
    '"created":1.0,"exchange_ns":"","run_id":"0123456789abcdef","generation":[5,5],'
    '"schema":{"structure":"dict","width":6,"ntype":null,"fields":[{"key":"x","kind":'
    '"tensor","shape":[-1],"dtype":"int64","axis":0},{"key":"r","kind":"record","shape":'
    '[3],"dtype":"uint8","descr":[["p","<f4"],["q","<i8",[2]]],"rclass":"ndarray",'
    '"offset":0},{"key":"v","kind":"record","shape":[],"dtype":"uint8","descr":[["p",'
    '"<f4"],["q","<i8",[2]]],"rclass":"void","offset":60},{"key":"ra","kind":"record",'
    '"shape":[3],"dtype":"uint8","descr":[["p","<f4"],["q","<i8",[2]]],"rclass":'
    '"recarray","offset":80},{"key":"b","kind":"npscalar","shape":[],"dtype":"bool",'
    '"offset":140},{"key":"f","kind":"npscalar","shape":[],"dtype":"float64","offset":'
    '144}]},"vars":["dict/packed","dict/0"],"packed":{"var":"dict/packed","row_bytes":152}}')
_META_V4_TUPLE = (
    '{"format":"pyddstore.torch.meta","version":4,"name":"t","n_core":2,"total":9,'
    '"created":1.0,"exchange_ns":"","run_id":"0123456789abcdef","generation":[5],'
    '"schema":{"structure":"tuple","width":5,"ntype":null,"fields":[{"key":0,"kind":'
    '"tensor","shape":[3],"dtype":"bfloat16","offset":0},{"key":1,"kind":"npscalar",'
    '"shape":[],"dtype":"int32","offset":8},{"key":2,"kind":"float","shape":[],"dtype":'
    '"float64","offset":16},{"key":3,"kind":"bool","shape":[],"dtype":"bool","offset":24},'
    '{"key":4,"kind":"int","shape":[],"dtype":"int64","offset":32}]},"vars":'
    '["tuple/packed"],"packed":{"var":"tuple/packed","row_bytes":40}}')


def test_meta_files_of_the_python_layout_read_back():
    from pyddstore.torch.dataset import _parse_meta
    from pyddstore.torch.packing import RowLayout, layout_of
    from pyddstore.torch.schema import Schema
    meta, sch = _parse_meta("p", _META_V4.encode(), "d")
    assert [(f.key, f.var, f.axis, f.offset, f.nbytes) for f in sch.fields] == [
        ("x", "dict/0", 0, None, 8), ("r", "dict/packed", None, 0, 60),
        ("v", "dict/packed", None, 60, 20), ("ra", "dict/packed", None, 80, 60),
        ("b", "dict/packed", None, 140, 1), ("f", "dict/packed", None, 144, 8)]
    assert sch.field("ra").rclass == "recarray" and sch.field("v").rdtype.itemsize == 20
    meta, sch = _parse_meta("p", _META_V4_TUPLE.encode(), "t")
    lay = RowLayout("tuple/packed", sch.fields, meta["packed"]["row_bytes"])
    assert lay.spec(sch.fields) == ("tuple/packed", 40, [0, 8, 16, 24, 32])
    assert sch.fields[0].torch_dtype == torch.bfloat16
    # and the layout computed today is the one those files record
    again = Schema.from_description(json.loads(_META_V4_TUPLE)["schema"])
    for f in again.fields:
        f.offset = None
    assert layout_of("t", again).spec(again.fields) == ("t/packed", 40, [0, 8, 16, 24, 32])


def test_pack_layout_places_and_checks():
    """pack_layout (C++): fields in order, each aligned to its element size,
    the row padded to 8; a layout read back must place every field inside
    the row, aligned, without overlap (ValueError otherwise)."""
    from pyddstore.torch._ext import ext
    offs, rb = ext.pack_layout([("a", 1, 1, None), ("b", 8, 8, None), ("c", 6, 2, None),
                                ("d", 3, 1, None), ("e", 4, 4, None)], None)
    assert (offs, rb) == ([0, 8, 16, 22, 28], 32)
    assert ext.pack_layout([("a", 1, 1, None)], None) == ([0], 8)
    assert ext.pack_layout([("a", 4, 4, 4), ("b", 4, 4, 0)], 8) == ([4, 0], 8)
    for fields, rb, match in [
            ([("a", 4, 4, 2)], 8, "does not fit"),             # misaligned
            ([("a", 4, 4, 8)], 8, "does not fit"),             # past the row
            ([("a", 4, 4, (1 << 70))], 8, "does not fit"),     # huge
            ([("a", 8, 4, 0), ("b", 4, 4, 4)], 16, "overlap"),
            ([("a", 4, 4, 0), ("b", 4, 4, None)], 8, "every fixed field"),
            ([], 8, "every fixed field")]:
        with pytest.raises(ValueError, match=match):
            ext.pack_layout(fields, rb)


def test_budget_batches_match_the_greedy_rule():
    """budget_batches (C++) = the greedy rule BudgetBatchSampler documents:
    a batch closes before the sample that would take it over the budget; a
    sample over the budget alone is a batch of its own."""
    from pyddstore.torch._ext import ext

    def greedy(idx, costs, budget):
        out, cur, acc = [], [], 0
        for i, c in zip(idx, costs):
            if cur and acc + c > budget:
                out.append(cur)
                cur, acc = [], 0
            cur.append(i)
            acc += c
        return out + ([cur] if cur else [])

    rng = np.random.default_rng(3)
    for n in (0, 1, 7, 500):
        idx = rng.permutation(n).astype(np.int64) + 10
        costs = rng.integers(0, 30, n).astype(np.int64)
        for budget in (1, 5, 29, 100, (1 << 63) - 1):
            got = ext.budget_batches(torch.from_numpy(idx), torch.from_numpy(costs), budget)
            assert got == greedy(idx.tolist(), costs.tolist(), budget)
    with pytest.raises(ValueError, match="int64"):
        ext.budget_batches(torch.zeros(3, dtype=torch.int32), torch.zeros(3, dtype=torch.int64), 4)


@pytest.mark.parametrize("change, match", [
    (lambda m: m.__setitem__("version", True), "version"),
    (lambda m: m.__setitem__("n_core", 1.0), "'n_core'"),
    (lambda m: m.__setitem__("total", -1), "'total'"),
    (lambda m: m.__setitem__("run_id", "0123456789abcde\udc80"), "'run_id'"),
    (lambda m: m.__setitem__("run_id", "0123456789ABCDEF"), "'run_id'"),
    (lambda m: m.__setitem__("generation", [True, 1]), "'generation'"),
    (lambda m: m.__setitem__("vars", ["dict/packed", ""]), "'vars'"),
    (lambda m: m.__setitem__("packed", [1]), "'packed'"),
    (lambda m: m["schema"]["fields"][1].__setitem__("offset", -8), "'schema'"),
    (lambda m: m["schema"]["fields"][1].__setitem__("offset", 1 << 70), "'schema'"),
    (lambda m: m["schema"]["fields"][0].__setitem__("offset", 0), "'vars'|'schema'"),
    (lambda m: m["schema"]["fields"][0].__setitem__("axis", "0"), "'schema'"),
    (lambda m: m["schema"].__setitem__("fields", [3, 4]), "'vars'|'schema'"),
    (lambda m: m.__setitem__("name", "\udc80" * 400), "'name'"),
])
def test_meta_check_names_the_field(change, match):
    """meta_check (C++) refuses damaged meta files with a ValueError naming
    the file and the field, never another exception."""
    from pyddstore.torch.dataset import _parse_meta
    m = json.loads(_META_V4)
    change(m)
    with pytest.raises(ValueError, match=match) as e:
        _parse_meta("the.meta.json", json.dumps(m).encode(), "d")
    assert str(e.value).startswith("the.meta.json: ")
