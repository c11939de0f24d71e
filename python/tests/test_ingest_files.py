"""DistDataset.from_hdf5 / from_parquet: files written by pyddstore.io's
writers from generated samples read back equal to the samples (every key,
every type, ragged and fixed, empty samples, one sample per rank, keys= /
columns=, methods 0 and 1); Parquet row groups divided among the ranks; bad
files are the same error class on every rank and leave the store usable.

Run: tools/ddrun -n 2 -- .venv/bin/python -m pytest -q python/tests/test_ingest_files.py
(the suite runs it at 1, 2 and 4 ranks; 3 by hand).
"""
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _torch_util import (N_ODD, assert_all, fresh_name, require_method, same,  # noqa: E402
                         shared_tmpdir, world)
from pyddstore.torch import DistDataset  # noqa: E402


def _h5():
    return pytest.importorskip("h5py")


def _pq():
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    return pq


# ------------------------------------------------------------------ samples --
def sample(i, fmt):
    """Sample i: every stored type, fixed and ragged; empty ragged samples
    (i % 5 == 0 for most ragged keys), text with empty and non-ASCII strings."""
    n = (i + 1) % 5                              # 0..4 atoms (0: i = 4, 9, ...)
    e = (i * 3 + 1) % 4                          # 0..3 edges (0: i = 1, 5, ...)
    s = {
        # ragged
        "pos": (np.arange(3 * n, dtype=np.float32).reshape(n, 3) + i * 0.25),
        "z": np.arange(n, dtype=np.uint8) + np.uint8(i),
        "mask": (np.arange(n) + i) % 3 == 0,
        "charge": np.arange(e, dtype=np.int32) - i,
        "h": (np.arange(n, dtype=np.float16) / np.float16(4)) + np.float16(i % 7),
        "energies": np.linspace(-1.0, 1.0, e) * (i + 1),            # float64
        "nbr": np.full((e, 2), i, dtype=np.int64) + np.arange(2),    # [E, 2]
        "smiles": "C" * (i % 3) + ("é" if i % 2 else "") + ("N" if i % 4 == 1 else ""),
        # fixed
        "y": np.float64(i * 1.5),                                     # 0-d
        "id": np.int32(1000 - i),
        "big": np.int64(i) << 40,
        "ok": np.bool_(i % 3 == 1),
        "cell": np.arange(9, dtype=np.float32).reshape(3, 3) * i,
        "f16": np.full((2, 2), i / 8, dtype=np.float16),
        "u8": np.array([i, 255 - i, 7], dtype=np.uint8),
        "flags": np.array([i % 2 == 0, True]),
        "w": np.arange(4, dtype=np.float64) - i,
    }
    if fmt == "hdf5":          # ragged along a later dimension: HDF5 (and ADIOS) only
        s["edge_index"] = np.stack([np.arange(e), np.arange(e) + i]).astype(np.int64)
    return s


RAGGED = {"pos", "z", "mask", "charge", "h", "energies", "nbr", "smiles", "edge_index"}


def want(i, fmt, keys=None):
    s = sample(i, fmt)
    keys = list(s) if keys is None else keys
    return {k: s[k] if isinstance(s[k], str) else torch.from_numpy(np.array(s[k]))
            for k in keys}


def write(fmt, path, n, **kw):
    samples = [sample(i, fmt) for i in range(n)]
    if fmt == "hdf5":
        kw.pop("row_group_size", None)
        from pyddstore.io.hdf5 import write_hdf5
        write_hdf5(path, "trainset", samples, **kw)
    else:
        from pyddstore.io.parquet import write_parquet
        write_parquet(path, samples, **kw)


def fixture(comm, fmt, n, tag="", **kw):
    """A file of n samples, written once by rank 0, the same path on every rank."""
    _h5() if fmt == "hdf5" else _pq()
    d = shared_tmpdir(comm, "ingest")
    ext = "h5" if fmt == "hdf5" else "parquet"
    path = os.path.join(d, f"{fmt}-{n}-{tag}-{comm.Get_size()}.{ext}")
    err = None
    if comm.Get_rank() == 0 and not os.path.exists(path):
        try:
            write(fmt, path, n, **kw)
        except Exception as e:  # noqa: BLE001 - reported on every rank below
            err = f"{type(e).__name__}: {e}"
    err = comm.bcast(err, root=0)
    assert err is None, err
    return path


def load(fmt, path, comm, method=0, keys=None, **kw):
    kw.setdefault("name", fresh_name(fmt))
    if method != 0:
        require_method(method, comm)
        kw.setdefault("handshake_dir", shared_tmpdir(comm, "hs"))
    if fmt == "hdf5":
        return DistDataset.from_hdf5(path, "trainset", comm, keys=keys, method=method, **kw)
    return DistDataset.from_parquet(path, comm, columns=keys, method=method, **kw)


def check_items(comm, ds, fmt, n, keys=None):
    """Every item and one batch of all (shuffled, with repeats) equal the samples."""
    bad = ""
    for i in range(n):
        bad = same(ds[i], want(i, fmt, keys), f"ds[{i}]")
        if bad:
            break
    if not bad:
        idx = np.random.default_rng(comm.Get_rank()).permutation(n).tolist() + [0, n - 1, 0]
        for i, got in zip(idx, ds.__getitems__(idx)):
            bad = same(got, want(i, fmt, keys), f"__getitems__[{i}]")
            if bad:
                break
    assert_all(comm, not bad, bad)


FMTS = ["hdf5", "parquet"]


# ------------------------------------------------------------------ equality --
@pytest.mark.parametrize("method", [0, 1])
@pytest.mark.parametrize("fmt", FMTS)
def test_items_equal_samples(fmt, method):
    comm = world()
    path = fixture(comm, fmt, N_ODD, row_group_size=4)
    ds = load(fmt, path, comm, method)
    try:
        assert_all(comm, len(ds) == N_ODD, len(ds))
        keys = list(sample(0, fmt))
        assert_all(comm, ds.fields == keys, ds.fields)
        ragged = set(ds.ragged_fields)
        assert_all(comm, ragged == RAGGED & set(keys), f"ragged fields {sorted(ragged)}")
        assert_all(comm, ds.ragged_fields.get("edge_index", 1) == 1, ds.ragged_fields)
        want_shapes = {"y": (), "id": (), "ok": (), "cell": (3, 3), "u8": (3,),
                       "pos": (-1, 3), "nbr": (-1, 2), "z": (-1,)}
        got = {k: ds.shapes[k] for k in want_shapes}
        assert_all(comm, got == want_shapes, got)
        check_items(comm, ds, fmt, N_ODD)
        rep = ds.ingest_report
        assert_all(comm, len(rep["bytes"]) == comm.Get_size() and sum(rep["bytes"]) > 0, rep)
    finally:
        ds.free()


@pytest.mark.parametrize("fmt", FMTS)
def test_packed_fixed_fields(fmt):
    """pack_fields: fixed keys land in one packed row (reads through a buffer)."""
    comm = world()
    path = fixture(comm, fmt, N_ODD, row_group_size=4)
    ds = load(fmt, path, comm, pack_fields=True)
    try:
        check_items(comm, ds, fmt, N_ODD)
    finally:
        ds.free()


@pytest.mark.parametrize("fmt", FMTS)
def test_keys_select_and_order(fmt):
    comm = world()
    path = fixture(comm, fmt, N_ODD, row_group_size=4)
    keys = ["smiles", "y", "pos"] + (["edge_index"] if fmt == "hdf5" else ["nbr"])
    ds = load(fmt, path, comm, keys=keys)
    try:
        assert_all(comm, ds.fields == keys, ds.fields)
        check_items(comm, ds, fmt, N_ODD, keys)
    finally:
        ds.free()
    ds = load(fmt, path, comm, keys="w")            # one name
    try:
        check_items(comm, ds, fmt, N_ODD, ["w"])
    finally:
        ds.free()


@pytest.mark.parametrize("method", [0, 1])
@pytest.mark.parametrize("fmt", FMTS)
def test_one_sample_per_rank(fmt, method):
    """As many samples as ranks; Parquet: one row group for all (fewer groups
    than ranks: balanced row ranges) and one group per sample."""
    comm = world()
    n = comm.Get_size()
    for rg in ((n, 1) if fmt == "parquet" else (None,)):
        kw = {} if rg is None else {"row_group_size": rg}
        path = fixture(comm, fmt, n, tag=f"one{rg}", **kw)
        ds = load(fmt, path, comm, method)
        try:
            assert_all(comm, (ds.lo, ds.hi) == (comm.Get_rank(), comm.Get_rank() + 1),
                       (ds.lo, ds.hi))
            check_items(comm, ds, fmt, n)
        finally:
            ds.free()


@pytest.mark.parametrize("fmt", FMTS)
def test_key_empty_in_every_sample(fmt):
    """A ragged key whose every sample is empty (a dataset of molecules
    without edges) loads: items of shape [0, 3]."""
    comm = world()
    n = comm.Get_size() + 1
    path = bad_path(comm, f"allempty.{fmt}")

    def mk():
        if fmt == "hdf5":
            from pyddstore.io.hdf5 import write_hdf5
            write_hdf5(path, "trainset", [{"pos": np.zeros((0, 3), np.float32),
                                          "y": np.float64(i)} for i in range(n)],
                       ragged=["pos"])
        else:
            import pyarrow as pa
            pos = pa.array([[] for _ in range(n)], pa.list_(pa.list_(pa.float32(), 3)))
            _pq().write_table(pa.table({"pos": pos, "y": np.arange(n, dtype=np.float64)}),
                              path, row_group_size=1)
    on_rank0(comm, mk)
    ds = load(fmt, path, comm)
    try:
        bad = ""
        for i in range(n):
            bad = same(ds[i], {"pos": torch.zeros((0, 3)), "y": torch.tensor(float(i),
                                                                       dtype=torch.float64)})
            if bad:
                break
        assert_all(comm, not bad, bad)
    finally:
        ds.free()


def test_parquet_row_groups_divided():
    """Whole row groups per rank, contiguous, balanced by rows."""
    comm = world()
    from pyddstore.io.parquet import ParquetSource, _balanced_groups
    path = fixture(comm, "parquet", N_ODD, row_group_size=4)     # 9 groups of 4, one of 1
    ds = load("parquet", path, comm, keys=["z", "y"])
    try:
        cuts = comm.allgather((ds.lo, ds.hi))
        ok = cuts[0][0] == 0 and cuts[-1][1] == N_ODD and all(
            a[1] == b[0] for a, b in zip(cuts, cuts[1:]))
        ok = ok and all(lo % 4 == 0 and (hi % 4 == 0 or hi == N_ODD) for lo, hi in cuts)
        assert_all(comm, ok, cuts)
        check_items(comm, ds, "parquet", N_ODD, ["z", "y"])
    finally:
        ds.free()
    src = ParquetSource(path)
    try:
        bad = []
        for p in range(1, 14):
            sp = src.split(p)
            if len(sp) != p or sp[0][0] != 0 or sp[-1][1] != N_ODD or any(
                    a[1] != b[0] for a, b in zip(sp, sp[1:])):
                bad.append((p, sp))
            elif p <= 10 and any(lo % 4 or (hi % 4 and hi != N_ODD) or hi <= lo
                                 for lo, hi in sp):
                bad.append((p, "not whole groups", sp))
            elif p > 10 and [hi - lo for lo, hi in sp] != [
                    N_ODD // p + (r < N_ODD % p) for r in range(p)]:
                bad.append((p, "fewer groups than ranks: not balanced rows", sp))
        # balanced: 4 ranks over 9x4+1 rows -> 12/8/8/9 or so, never 36/0/...
        sizes = [hi - lo for lo, hi in src.split(4)]
        if max(sizes) > 12:
            bad.append((4, sizes))
        assert_all(comm, not bad, bad)
    finally:
        src.close()
    b, _ = _balanced_groups(np.array([5, 1, 1, 1, 10]), 3)
    assert_all(comm, b == [0, 2, 4, 5], b)


def test_hdf5_columns_writer_layout():
    """write_hdf5_columns: ragged along dim 1, offsets, chunked + compressed
    datasets, a fixed key; the layout on disk is the documented one."""
    comm = world()
    h5py = _h5()
    from pyddstore.io.hdf5 import write_hdf5_columns
    d = shared_tmpdir(comm, "ingest")
    path = os.path.join(d, f"cols-{comm.Get_size()}.h5")
    n = N_ODD
    counts = np.arange(n, dtype=np.int64) % 4
    E = int(counts.sum())
    ei = np.arange(2 * E, dtype=np.int64).reshape(2, E)
    txt = [("x" * (i % 3)).encode() for i in range(n)]
    if comm.Get_rank() == 0:
        write_hdf5_columns(path, "/a/b", {
            "ei": (ei, counts, 1),
            "t": (np.frombuffer(b"".join(txt), np.uint8), [len(t) for t in txt]),
            "y": np.arange(n, dtype=np.float32)},
            n, text=["t"], offsets=True, chunks=True, compression="gzip")
        with h5py.File(path, "r") as f:
            g = f["/a/b"]
            lay = (list(g), sorted(g["ei"]), int(g["ei"].attrs["variable_dim"]),
                   int(g["t"].attrs["text"]), g["ei/counts"].dtype.name,
                   g["ei/offsets"][:].tolist())
        ok = lay[:5] == (["ei", "t", "y"], ["counts", "offsets", "values"], 1, 1, "int64") \
            and lay[5] == np.concatenate(([0], np.cumsum(counts)[:-1])).tolist()
    else:
        ok, lay = True, None
    assert_all(comm, ok, lay)
    comm.Barrier()
    ds = DistDataset.from_hdf5(path, "a/b", comm, name=fresh_name("cols"))
    try:
        bad = ""
        offs = np.concatenate(([0], np.cumsum(counts)))
        for i in range(n):
            w = {"ei": torch.from_numpy(ei[:, offs[i]:offs[i + 1]].copy()),
                 "t": txt[i].decode(), "y": torch.tensor(float(i), dtype=torch.float32)}
            bad = same(ds[i], w, f"ds[{i}]")
            if bad:
                break
        assert_all(comm, not bad, bad)
    finally:
        ds.free()


def test_parquet_foreign_writer_variants():
    """A file pyarrow writes itself: large_list / large_string, no statistics
    (every rank reads the ragged columns' lengths), gzip, a column of lists
    that all have one length, odd row groups."""
    comm = world()
    import pyarrow as pa
    n = N_ODD
    x = [np.arange(i % 4, dtype=np.int32) * i for i in range(n)]
    t = [("ab" * (i % 3)) + ("ü" if i % 5 == 0 else "") for i in range(n)]
    same_len = [np.full(3, i, np.float32) for i in range(n)]
    path = bad_path(comm, "variants.parquet")
    on_rank0(comm, lambda: _pq().write_table(pa.table({
        "x": pa.array([a.tolist() for a in x], pa.large_list(pa.int32())),
        "t": pa.array(t, pa.large_string()),
        "v": pa.array([a.tolist() for a in same_len], pa.list_(pa.float32())),
        "h": pa.array(np.arange(n, dtype=np.float16)),
    }), path, row_group_size=6, write_statistics=False, compression="gzip"))
    for method in (0, 1):
        ds = load("parquet", path, comm, method)
        try:
            bad = ""
            for i in range(n):
                bad = same(ds[i], {"x": torch.from_numpy(x[i]), "t": t[i],
                                   "v": torch.from_numpy(same_len[i]),
                                   "h": torch.tensor(i, dtype=torch.float16)}, f"ds[{i}]")
                if bad:
                    break
            assert_all(comm, not bad, bad)
            assert_all(comm, ds.shapes["v"] == (3,), ds.shapes)
        finally:
            ds.free()


def test_hdf5_foreign_variants():
    """Big-endian datasets, a chunked + compressed fixed one, offsets, a
    ragged key along dim 0 of 2-D values."""
    comm = world()
    h5py = _h5()
    n = N_ODD
    c = (np.arange(n, dtype=np.int64) * 7) % 3
    vals = np.arange(int(c.sum()) * 2, dtype=">f8").reshape(-1, 2)
    path = bad_path(comm, "variants.h5")

    def mk():
        with h5py.File(path, "w") as f:
            g = f.create_group("trainset")
            g.create_dataset("y", data=np.arange(n, dtype=">i4"), chunks=(5,),
                             compression="gzip")
            s = _ragged(g, "x", vals, c.astype(">i8"))
            s.create_dataset("offsets", data=np.concatenate(([0], np.cumsum(c)[:-1])))
    on_rank0(comm, mk)
    ds = load("hdf5", path, comm)
    try:
        off = np.concatenate(([0], np.cumsum(c)))
        bad = ""
        for i in range(n):
            # (a group without track_order lists its members by name)
            bad = same(ds[i], {"x": torch.from_numpy(vals[off[i]:off[i + 1]].astype("<f8")),
                               "y": torch.tensor(i, dtype=torch.int32)}, f"ds[{i}]")
            if bad:
                break
        assert_all(comm, not bad, bad)
    finally:
        ds.free()


# --------------------------------------------------- bad input, every rank --
def expect_all(comm, exc, fn, match=None, usable=True):
    """fn() raises `exc` on every rank (never hangs, never passes), and the
    store is usable afterwards (a new dataset loads and reads)."""
    try:
        fn()
    except exc as e:
        msg = str(e)
        ok = match is None or match in msg
        assert_all(comm, ok, f"{type(e).__name__} {msg!r} lacks {match!r}")
    except Exception as e:  # noqa: BLE001
        assert_all(comm, False, f"raised {type(e).__name__}: {e}")
    else:
        assert_all(comm, False, "did not raise")
    if usable:
        still_usable(comm)


def still_usable(comm):
    """A new dataset loads and reads equal (nothing half-made in the way)."""
    path = fixture(comm, "parquet", N_ODD, tag="after", row_group_size=8)
    ds = load("parquet", path, comm, keys=["pos", "smiles"])
    try:
        check_items(comm, ds, "parquet", N_ODD, ["pos", "smiles"])
    finally:
        ds.free()


def on_rank0(comm, fn):
    """fn() on rank 0 (writing a bad file), then every rank goes on."""
    err = None
    if comm.Get_rank() == 0:
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            err = f"{type(e).__name__}: {e}"
    err = comm.bcast(err, root=0)
    assert err is None, err


def bad_path(comm, name):
    return os.path.join(shared_tmpdir(comm, "ingest"), f"bad-{comm.Get_size()}-{name}")


@pytest.mark.parametrize("fmt", FMTS)
def test_missing_key(fmt):
    comm = world()
    path = fixture(comm, fmt, N_ODD, row_group_size=4)
    expect_all(comm, KeyError, lambda: load(fmt, path, comm, keys=["pos", "nope"]), "nope")
    if fmt == "hdf5":
        expect_all(comm, KeyError, lambda: DistDataset.from_hdf5(
            path, "validset", comm, name=fresh_name("m")), "validset")


def _h5_bad(comm, name, build):
    h5py = _h5()
    path = bad_path(comm, name + ".h5")

    def mk():
        with h5py.File(path, "w") as f:
            build(f.create_group("trainset"))
    on_rank0(comm, mk)
    return path


def _ragged(g, k, values, counts, **attrs):
    s = g.create_group(k)
    s.create_dataset("values", data=values)
    s.create_dataset("counts", data=counts)
    for a, v in attrs.items():
        s.attrs[a] = v
    return s


@pytest.mark.parametrize("case,exc,match", [
    ("sum", ValueError, "sum to"),            # counts do not sum to the values' length
    ("counts_dtype", ValueError, "int64"),
    ("offsets", ValueError, "offsets"),
    ("int16", ValueError, "int16"),
    ("strings", ValueError, "'/trainset/name'"),
    ("n_differs", ValueError, "different numbers of samples"),
    ("dim", ValueError, "variable_dim"),
    ("not_layout", ValueError, "no dataset 'counts'"),
    ("scalar", ValueError, "scalar"),
    ("empty_group", ValueError, "no datasets"),
])
def test_hdf5_bad_layout(case, exc, match):
    comm = world()
    n = N_ODD
    c = np.full(n, 2, dtype=np.int64)

    def build(g):
        g.create_dataset("y", data=np.arange(n, dtype=np.float32))
        if case == "empty_group":
            del g["y"]
        elif case == "sum":
            _ragged(g, "x", np.zeros(2 * n - 1), c)
        elif case == "counts_dtype":
            _ragged(g, "x", np.zeros(2 * n), c.astype(np.int32))
        elif case == "offsets":
            s = _ragged(g, "x", np.zeros(2 * n), c)
            o = np.arange(n, dtype=np.int64) * 2
            o[n - 1] += 1                        # wrong on the last rank only
            s.create_dataset("offsets", data=o)
        elif case == "int16":
            g.create_dataset("q", data=np.zeros((n, 2), np.int16))
        elif case == "strings":
            g.create_dataset("name", data=np.array([b"ab"] * n, dtype="S2"))
        elif case == "n_differs":
            g.create_dataset("q", data=np.zeros(n + 1, np.float32))
        elif case == "dim":
            _ragged(g, "x", np.zeros(2 * n), c, variable_dim=3)
        elif case == "not_layout":
            s = g.create_group("x")
            s.create_dataset("values", data=np.zeros(n))
        elif case == "scalar":
            g.create_dataset("s", data=np.float32(1))
    path = _h5_bad(comm, case, build)
    expect_all(comm, exc, lambda: DistDataset.from_hdf5(path, "trainset", comm,
                                                        name=fresh_name("b")), match)


def _pq_bad(comm, name, table, **kw):
    pq = _pq()
    path = bad_path(comm, name + ".parquet")
    on_rank0(comm, lambda: pq.write_table(table, path, **kw))
    return path


@pytest.mark.parametrize("case,match", [
    ("int16", "column 'q' has type int16"),
    ("timestamp", "column 'q' has type timestamp"),
    ("struct", "column 'q' has type struct"),
    ("list_dim1", "column 'q' has type list<"),
    ("null_row", "null"),          # a null list in the last row (the last rank's group)
    ("null_inside", "null"),       # a null inside a list
    ("null_scalar", "null"),       # a null number (row groups' statistics: at open)
])
def test_parquet_bad_columns(case, match):
    comm = world()
    import pyarrow as pa
    n = N_ODD
    good = pa.array([[1.0] * (i % 3) for i in range(n)], pa.list_(pa.float32()))
    q = {"int16": lambda: pa.array(np.arange(n, dtype=np.int16)),
         "timestamp": lambda: pa.array(np.arange(n).astype("datetime64[s]")),
         "struct": lambda: pa.array([{"a": i} for i in range(n)]),
         "list_dim1": lambda: pa.array([[[1], [2, 3]]] * n),
         "null_row": lambda: pa.array([[1]] * (n - 1) + [None], pa.list_(pa.int64())),
         "null_inside": lambda: pa.array([[1, None if i == 2 else 2] for i in range(n)],
                                         pa.list_(pa.int64())),
         "null_scalar": lambda: pa.array([1.0] * (n - 1) + [None], pa.float64())}[case]()
    path = _pq_bad(comm, case, pa.table({"x": good, "q": q}), row_group_size=4)
    expect_all(comm, ValueError, lambda: DistDataset.from_parquet(
        path, comm, name=fresh_name("b")), match)
    if case.startswith("null") or case == "int16":
        return
    # the other columns alone load
    ds = DistDataset.from_parquet(path, comm, columns=["x"], name=fresh_name("x"))
    try:
        got = [ds[i]["x"].tolist() for i in range(n)]
        assert_all(comm, got == [[1.0] * (i % 3) for i in range(n)], got[:5])
    finally:
        ds.free()


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("how", ["truncated", "garbage", "missing"])
def test_unreadable_file(fmt, how):
    comm = world()
    good = fixture(comm, fmt, N_ODD, row_group_size=4)
    path = bad_path(comm, f"{how}.{fmt}")

    def mk():
        if how == "truncated":
            with open(good, "rb") as f:
                data = f.read()
            with open(path, "wb") as f:
                f.write(data[:len(data) // 2])
        elif how == "garbage":
            with open(path, "wb") as f:
                f.write(b"not a file of ours " * 100)
    on_rank0(comm, mk)
    exc, match = (FileNotFoundError, "no such file") if how == "missing" else \
        (ValueError, "cannot be opened")
    expect_all(comm, exc, lambda: load(fmt, path, comm), match)


@pytest.mark.parametrize("fmt", FMTS)
def test_file_differs_between_ranks(fmt):
    """Rank 1 opens another file: the same error on every rank."""
    comm = world()
    if comm.Get_size() < 2:
        pytest.skip("needs 2 ranks")
    a = fixture(comm, fmt, N_ODD, row_group_size=4)
    b = fixture(comm, fmt, N_ODD + 2, row_group_size=4)
    path = b if comm.Get_rank() == 1 else a
    expect_all(comm, ValueError, lambda: load(fmt, path, comm), "another file")


@pytest.mark.parametrize("fmt", FMTS)
def test_missing_package_names_extra(fmt, monkeypatch):
    """Without h5py / pyarrow: ImportError naming the extra, on every rank."""
    comm = world()
    for m in (["h5py"] if fmt == "hdf5" else ["pyarrow", "pyarrow.parquet"]):
        monkeypatch.setitem(sys.modules, m, None)
    path = bad_path(comm, "never-opened")
    expect_all(comm, ImportError, lambda: load(fmt, path, comm), f"pyddstore[{fmt}]",
               usable=False)
    monkeypatch.undo()
    still_usable(comm)
