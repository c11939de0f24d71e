"""DistDataset.from_adios: HydraGNN's ADIOS2 layout straight into the shards
(issue 37, item 1).

Files written by pyddstore.io.write_adios (HydraGNN's layout, written from
its description) and read back at every rank count: every sample of every
key equals the source, for every type (double, float, int32, int64, uint8
text as str), ragged keys along the first and another dimension, fixed keys,
samples with no entries, one sample per rank, keys=, methods 0 and 1,
pack_fields, ThreadDataLoader batches; bad files are the same error on
every rank and leave nothing behind.

Run at 1, 2, 3 or 4 ranks:
    tools/ddrun -n 3 -- .venv/bin/python -m pytest -q python/tests/test_ingest_adios.py
"""
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="DistDataset needs torch")
adios2 = pytest.importorskip("adios2", reason="from_adios needs the adios2 package "
                             "(pyddstore[adios2]; ./ddstore setup installs it)")

import pyddstore  # noqa: E402
import pyddstore.io as pio  # noqa: E402
from pyddstore.torch import DistDataset, ThreadDataLoader  # noqa: E402

from _torch_util import (assert_all, on_rank0, require_method, shared_tmpdir,  # noqa: E402
                         world)

N = 29


def sample(i):
    """A molecule-like graph: 0..6 atoms (0: none), 0..4 edges, text."""
    n = (i * 5) % 7
    e = (i * 3) % 5
    return {
        "x": (np.arange(n * 3, dtype=np.float32).reshape(n, 3) + i * 0.5),
        "pos": np.full((n, 3), i, dtype=np.float64) - 0.25,
        "z": np.arange(n, dtype=np.int32) + i,
        "edge_index": np.stack([np.arange(e), np.arange(e)[::-1]]).astype(np.int64) + i,
        "edge_attr": np.full((e, 2), -i, dtype=np.float64),
        "energy": np.array([i * 1.25]),
        "forces3": np.full((3, 2), i, dtype=np.int64),
        "smiles": "C" * (i % 4) + "(=O)é" * (i % 2),
    }


def same(got, want):
    if isinstance(want, str):
        return isinstance(got, str) and got == want
    return isinstance(got, torch.Tensor) and got.dtype == torch.as_tensor(want).dtype and \
        torch.equal(got, torch.as_tensor(want))


@pytest.fixture(scope="module")
def bp():
    comm = world()
    d = shared_tmpdir(comm, "adios")
    path = os.path.join(d, "graphs.bp")
    def write():
        pio.write_adios(path, "trainset", [sample(i) for i in range(N)])
        pio.write_adios(os.path.join(d, "one.bp"), "trainset",
                        [sample(i) for i in range(1, 1 + comm.Get_size())])
    on_rank0(comm, write)
    return path


def _check_items(comm, ds, idx, want_of):
    bad = []
    for i, it in zip(idx, ds.__getitems__(list(idx))):
        for k, v in want_of(i).items():
            if not same(it[k], v):
                bad.append((i, k))
    for i in idx[:5]:                      # __getitem__ too
        it = ds[i]
        bad += [(i, k) for k, v in want_of(i).items() if not same(it[k], v)]
    assert_all(comm, not bad, f"wrong samples/keys {bad[:5]}")


@pytest.mark.parametrize("method", [0, 1])
def test_every_sample_and_key(bp, method):
    comm = world()
    require_method(method, comm)
    ds = DistDataset.from_adios(bp, "trainset", comm, method=method)
    try:
        assert ds.total == N == len(ds)
        assert ds.fields == list(sample(0))
        assert ds.ragged_fields == {"x": 0, "pos": 0, "z": 0, "edge_index": 1,
                                    "edge_attr": 0, "smiles": 0}
        assert ds.shapes["energy"] == (1,) and ds.shapes["forces3"] == (3, 2)
        assert ds.dtypes["z"] == "int32" and ds.dtypes["pos"] == "float64"
        _check_items(comm, ds, list(range(N)) + [N - 1, 0, 7], sample)
        rep = ds.ingest_report
        assert len(rep["bytes"]) == comm.Get_size() and sum(rep["bytes"]) > 0
    finally:
        ds.free()


def test_loader_batches(bp):
    """ThreadDataLoader over the dataset: ragged keys packed, text as lists."""
    comm = world()
    ds = DistDataset.from_adios(bp, "trainset", comm)
    try:
        seen, bad = 0, []
        for b in ThreadDataLoader(ds, batch_size=4, num_workers=1):
            idx = None
            for off in range(0, N, 4):         # the loader's order: sequential
                if off == seen:
                    idx = list(range(off, min(N, off + 4)))
            seen += len(b["smiles"])
            if b["smiles"] != [sample(i)["smiles"] for i in idx]:
                bad.append(("smiles", idx))
            want_x = torch.cat([torch.as_tensor(sample(i)["x"]) for i in idx])
            if not torch.equal(b["x"].values, want_x):
                bad.append(("x", idx))
            want_e = torch.cat([torch.as_tensor(sample(i)["edge_index"]) for i in idx], 1)
            if not torch.equal(b["edge_index"].values, want_e):
                bad.append(("edge_index", idx))
            if not torch.equal(b["energy"], torch.stack(
                    [torch.as_tensor(sample(i)["energy"]) for i in idx])):
                bad.append(("energy", idx))
        assert_all(comm, seen == N and not bad, f"{seen} samples, bad {bad[:3]}")
    finally:
        ds.free()


def test_keys_and_pack_fields(bp):
    comm = world()
    ds = DistDataset.from_adios(bp, "trainset", comm, keys=["smiles", "energy", "forces3"],
                                pack_fields=True, name="sub")
    try:
        assert ds.fields == ["smiles", "energy", "forces3"] and ds.pack_fields
        _check_items(comm, ds, list(range(N)),
                     lambda i: {k: sample(i)[k] for k in ("smiles", "energy", "forces3")})
    finally:
        ds.free()


def test_one_sample_per_rank(bp):
    comm = world()
    path = os.path.join(os.path.dirname(bp), "one.bp")
    ds = DistDataset.from_adios(path, "trainset", comm)
    try:
        assert ds.hi - ds.lo == 1
        _check_items(comm, ds, list(range(comm.Get_size())), lambda i: sample(i + 1))
    finally:
        ds.free()


def test_more_ranks_than_samples_is_an_error_on_every_rank(bp):
    comm = world()
    if comm.Get_size() == 1:
        pytest.skip("needs 2 ranks or more (fewer samples than ranks)")
    p = os.path.join(os.path.dirname(bp), "few.bp")
    on_rank0(comm, lambda: pio.write_adios(p, "t", [sample(3)] * (comm.Get_size() - 1)))
    _raises_everywhere(comm, ValueError, "every rank must own at least one sample",
                       lambda: DistDataset.from_adios(p, "t", comm))


# ------------------------------------------------------------ bad files --
def _bad(comm, name, write):
    d = shared_tmpdir(comm, "adios-bad")
    p = os.path.join(d, name)
    on_rank0(comm, lambda: os.path.exists(p) or write(p))
    return p


def _raises_everywhere(comm, exc, match, fn):
    err = None
    try:
        ds = fn()
    except Exception as e:  # noqa: BLE001 - checked below
        err = e
    else:
        ds.free()
    assert_all(comm, isinstance(err, exc) and (match in str(err)),
               f"expected {exc.__name__} '{match}', got {type(err).__name__}: {err}")


def test_missing_key(bp):
    comm = world()
    _raises_everywhere(comm, KeyError, "no key(s) ['nope']",
                       lambda: DistDataset.from_adios(bp, "trainset", comm, keys=["x", "nope"]))


def test_missing_label_and_file(bp):
    comm = world()
    _raises_everywhere(comm, ValueError, "no attribute 'validation/ndata'",
                       lambda: DistDataset.from_adios(bp, "validation", comm))
    _raises_everywhere(comm, ValueError, "cannot be opened",
                       lambda: DistDataset.from_adios(bp + ".missing", "trainset", comm))


def test_counts_that_do_not_sum(bp):
    comm = world()
    p = _bad(comm, "counts.bp", _write_raw)
    _raises_everywhere(comm, ValueError, "sum to 8, but the data has 10 entries",
                       lambda: DistDataset.from_adios(p, "t", comm))


def _write_raw(p):
    """A file whose 8 samples' counts (one row each) do not add up to x's 10
    rows."""
    x = np.arange(20, dtype=np.float32).reshape(10, 2)
    counts, offsets = np.ones(8, np.int64), np.arange(8, dtype=np.int64)
    b = adios2.bindings
    ad = b.ADIOS()
    io = ad.DeclareIO("raw")
    eng = io.Open(p, b.Mode.Write)
    io.DefineAttribute("t/ndata", np.array(8))
    io.DefineAttribute("t/keys", ["x"])
    v = io.DefineVariable("t/x", x, list(x.shape), [0, 0], list(x.shape), b.ConstantDims)
    eng.Put(v, x, b.Mode.Sync)
    io.DefineAttribute("t/x/variable_dim", np.array(0))
    for suffix, arr in (("variable_count", counts), ("variable_offset", offsets)):
        w = io.DefineVariable(f"t/x/{suffix}", arr, [8], [0], [8], b.ConstantDims)
        eng.Put(w, arr, b.Mode.Sync)
    eng.Close()


def test_unsupported_type(bp):
    comm = world()

    def write(p):
        pio.write_adios(p, "t", [{"a": np.arange(2, dtype=np.int16) + i} for i in range(4)])
    p = _bad(comm, "int16.bp", write)
    _raises_everywhere(comm, ValueError, "has type int16_t",
                       lambda: DistDataset.from_adios(p, "t", comm))


def test_truncated_file(bp):
    comm = world()

    def write(p):
        pio.write_adios(p, "t", [sample(i) for i in range(12)])
        data = os.path.join(p, "data.0")
        with open(data, "r+b") as f:
            f.truncate(os.path.getsize(data) // 3)
    p = _bad(comm, "trunc.bp", write)
    _raises_everywhere(comm, ValueError, "is truncated",     # (adios2 itself would
                       lambda: DistDataset.from_adios(p, "t", comm))   # wait forever)


def test_a_file_that_differs_between_ranks(bp):
    comm = world()
    if comm.Get_size() == 1:
        pytest.skip("needs 2 ranks: rank 1 opens another file")
    d = os.path.dirname(bp)
    other = os.path.join(d, "other.bp")
    on_rank0(comm, lambda: pio.write_adios(other, "trainset", [sample(i) for i in range(N + 1)]))
    path = other if comm.Get_rank() == 1 else bp
    _raises_everywhere(comm, ValueError, "rank 1 sees another file than rank 0",
                       lambda: DistDataset.from_adios(path, "trainset", comm))
    # nothing was left behind: a load after it works
    ds = DistDataset.from_adios(bp, "trainset", comm, keys=["energy"])
    try:
        _check_items(comm, ds, list(range(N)), lambda i: {"energy": sample(i)["energy"]})
    finally:
        ds.free()
