"""WindowedDataset and row_of.

Run: tools/ddrun -n 4 -- .venv/bin/python -m pytest -q python/tests/test_torch_windowed.py
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _torch_util import (N_ODD, Source, assert_all, fresh_name, make_sample,  # noqa: E402
                         same, world)
from pyddstore.torch import DistDataset, ThreadDataLoader, WindowedDataset, row_of  # noqa: E402
from torch.utils.data import ConcatDataset, DataLoader  # noqa: E402


@pytest.fixture(scope="module")
def base():
    comm = world()
    ds = DistDataset(Source("dict"), fresh_name("W"), comm)
    yield comm, ds
    ds.free()


def _stack(vals):
    """Values of one field over a window, stacked keeping the field's kind:
    tensors stay tensors, numpy arrays / scalars become a numpy array,
    Python numbers a numpy array (int64 / float64 / bool), as the original."""
    if isinstance(vals[0], torch.Tensor):
        return torch.stack(vals)
    if isinstance(vals[0], (np.ndarray, np.generic)):
        return np.stack(vals)
    return np.asarray(vals)


def _window(kind, s, window, dilation, keys=None):
    """The expected window sample: fields stacked (window, *shape)."""
    rows = [make_sample(kind, s + k * dilation) for k in range(window)]
    keys = keys or list(rows[0].keys())
    return {key: _stack([r[key] for r in rows]) for key in keys}


@pytest.mark.parametrize("window,stride,dilation", [(1, 1, 1), (3, 1, 1), (3, 2, 2),
                                                    (4, 5, 3)])
def test_windows(base, window, stride, dilation):
    comm, ds = base
    w = WindowedDataset(ds, window, stride=stride, dilation=dilation)
    span = (window - 1) * dilation + 1
    n = (N_ODD - span) // stride + 1
    bad = "" if len(w) == n else f"len {len(w)} != {n}"
    for i in range(len(w)):
        if bad:
            break
        bad = same(w[i], _window("dict", i * stride, window, dilation), f"w[{i}]")
    if not bad:
        idx = [n - 1, 0, 2 % n, 0]
        for i, got in zip(idx, w.__getitems__(idx)):
            bad = bad or same(got, _window("dict", i * stride, window, dilation), f"items[{i}]")
    if not bad:
        bad = same(w[-1], w[n - 1], "w[-1]")
    assert_all(comm, not bad, bad)
    assert w.shapes == {"x": (window, 2), "y": (window,), 3: (window, 4)}


def test_starts_and_fields(base):
    comm, ds = base
    starts = [0, 30, 7, 7, N_ODD - 5]
    w = WindowedDataset(ds, 3, dilation=2, starts=starts, fields=["x", 3])
    bad = "" if len(w) == len(starts) else "len"
    for i, s in enumerate(starts):
        bad = bad or same(w[i], _window("dict", s, 3, 2, ["x", 3]), f"w[{i}]")
    assert_all(comm, not bad, bad)
    with pytest.raises(IndexError):
        w.__getitems__([len(starts)])


@pytest.mark.parametrize("starts", [[0, N_ODD - 2], [-1], [N_ODD], [0, N_ODD - 3, N_ODD - 1]])
def test_out_of_range_starts(base, starts):
    """A start whose window reaches past the end (or before 0): IndexError at
    construction, naming it (also a ValueError, as it was)."""
    comm, ds = base
    with pytest.raises(IndexError, match=r"starts\[") as e:
        WindowedDataset(ds, 3, starts=starts)
    assert isinstance(e.value, ValueError)
    assert len(WindowedDataset(ds, 3, starts=[0, N_ODD - 3])) == 2     # the last fits


@pytest.mark.parametrize("kind", ["list", "namedtuple", "half", "tuple", "structured"])
def test_windows_keep_field_kinds(kind):
    """A window's fields keep their kind, as DistDataset's samples do: numpy
    fields are numpy arrays, tensors tensors (Python numbers: numpy arrays,
    as the original's)."""
    comm = world()
    ds = DistDataset(Source(kind), fresh_name("WK"), comm)
    try:
        w = WindowedDataset(ds, 3, dilation=2)

        def want(i):
            rows = [make_sample(kind, i + 2 * k) for k in range(3)]
            if isinstance(rows[0], dict):
                return {key: _stack([r[key] for r in rows]) for key in rows[0]}
            if isinstance(rows[0], (tuple, list)):
                vals = [_stack([r[j] for r in rows]) for j in range(len(rows[0]))]
                if hasattr(rows[0], "_fields"):             # a namedtuple stays one
                    return type(rows[0])(*vals)
                return list(vals) if isinstance(rows[0], list) else tuple(vals)
            return _stack(rows)
        bad = ""
        for i in (0, len(w) - 1):
            bad = bad or same(w[i], want(i), f"w[{i}]")
        for i, got in zip([4, 0, 4], w.__getitems__([4, 0, 4])):
            bad = bad or same(got, want(i), f"items[{i}]")
        assert_all(comm, not bad, bad)
    finally:
        ds.free()


def test_fields_give_a_dict_keyed_by_field():
    """With fields= a window is a dict keyed by field, whatever the source's
    structure (the original's), also in a batch of windows."""
    comm = world()
    ds = DistDataset(Source("list"), fresh_name("WD"), comm)
    try:
        w = WindowedDataset(ds, 2, starts=[0, 3], fields=[0, 2])
        rows = [make_sample("list", 3 + k) for k in range(2)]
        want = {0: _stack([r[0] for r in rows]), 2: _stack([r[2] for r in rows])}
        bad = same(w[1], want, "w[1]")
        got = w.__getitems__([1])
        bad = bad or same(got, [want], "items")
        assert_all(comm, not bad, bad)
        assert isinstance(w[0][2], np.ndarray) and w[0][2].dtype == np.bool_
    finally:
        ds.free()


def test_fields_select_as_distdataset(base):
    """fields= on WindowedDataset selects as on DistDataset: a single key or a
    list, in the given order; an unknown key is a ValueError naming it."""
    comm, ds = base
    for fields in ("x", [3, "x"], ["y"]):
        sub = DistDataset(Source("dict"), fresh_name("Wf"), comm, fields=fields)
        try:
            w1 = WindowedDataset(ds, 2, fields=fields)
            w2 = WindowedDataset(sub, 2)
            bad = "" if w1.shapes == w2.shapes and w1.dtypes == w2.dtypes else \
                f"{fields}: {w1.shapes} {w1.dtypes} vs {w2.shapes} {w2.dtypes}"
            bad = bad or same(w1[5], w2[5], f"fields={fields!r}")
            bad = bad or same(w1.__getitems__([1, 0]), w2.__getitems__([1, 0]), "items")
            assert_all(comm, not bad, bad)
        finally:
            sub.free()
    for bad_fields in (["nope"], "nope", ["x", "nope"]):
        with pytest.raises(ValueError, match="'nope'"):
            WindowedDataset(ds, 2, fields=bad_fields)
        with pytest.raises(ValueError, match="'nope'"):
            DistDataset(Source("dict"), fresh_name("Wn"), comm, fields=bad_fields)


def test_bad_arguments(base):
    comm, ds = base
    for kw in (dict(window=0), dict(window=2, stride=0), dict(window=2, dilation=0)):
        with pytest.raises(ValueError):
            WindowedDataset(ds, **kw)
    with pytest.raises(ValueError, match="nope"):
        WindowedDataset(ds, 2, fields=["nope"])
    with pytest.raises(TypeError):
        WindowedDataset(Source("dict"), 2)
    assert len(WindowedDataset(ds, N_ODD + 1)) == 0


@pytest.mark.parametrize("workers", [0, 2])
def test_loaders_over_windows(base, workers):
    """ThreadDataLoader's direct path (one read_rows per batch) equals
    DataLoader's default_collate of the per-sample windows."""
    comm, ds = base
    w = WindowedDataset(ds, 4, stride=3, dilation=2)
    ref = list(DataLoader(w, batch_size=3, shuffle=True,
                          generator=torch.Generator().manual_seed(4)))
    got = list(ThreadDataLoader(w, batch_size=3, shuffle=True, num_workers=workers,
                                generator=torch.Generator().manual_seed(4)))
    bad = "" if len(ref) == len(got) else "number of batches"
    for k, (a, b) in enumerate(zip(ref, got)):
        bad = bad or same(a, b, f"batch {k}")
    assert_all(comm, not bad, bad)


def test_row_of():
    comm = world()
    parts = [Source("tuple", n=4), Source("tuple", n=7), Source("tuple", n=5)]
    cat = ConcatDataset(parts)
    assert [row_of(cat, 0, 0), row_of(cat, 1, 0), row_of(cat, 1, 6), row_of(cat, 2, 4),
            row_of(cat, 2, 0)] == [0, 4, 10, 15, 11]
    # negative or out-of-range source and index: IndexError naming it (no
    # counting from the end)
    for args, what in (((cat, 3, 0), "source 3"), ((cat, -1, 0), "source -1"),
                       ((cat, 0, 4), "index 4"), ((cat, 1, -8), "index -8"),
                       ((cat, 2, -1), "index -1"), ((cat, 1, -1), "index -1")):
        with pytest.raises(IndexError, match=what):
            row_of(*args)
    # windows inside each file, as in the docs
    ds = DistDataset(cat, fresh_name("cat"), comm)
    try:
        dt = 2
        starts = [row_of(cat, k, t) for k in range(len(parts))
                  for t in range(0, len(cat.datasets[k]) - 2 * dt)]
        pairs = WindowedDataset(ds, window=3, dilation=dt, starts=starts)
        bad = ""
        for i, s in enumerate(starts):
            want = [make_sample("tuple", s - (cat.cumulative_sizes[k - 1] if k else 0) + j * dt)
                    for k in [next(k for k in range(3) if s < cat.cumulative_sizes[k])]
                    for j in range(3)]
            got = pairs[i]
            exp = (torch.stack([w[0] for w in want]), np.array([w[1] for w in want]))
            bad = bad or same(got, exp, f"pair {i}")
            k = next(k for k in range(3) if s < cat.cumulative_sizes[k])
            bad = bad or ("" if s + 2 * dt < cat.cumulative_sizes[k] else f"crosses file {k}")
        assert_all(comm, not bad, bad)
    finally:
        ds.free()
