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


def _window(kind, s, window, dilation, keys=None):
    """The expected window sample: fields stacked (window, *shape) as tensors."""
    rows = [make_sample(kind, s + k * dilation) for k in range(window)]
    keys = keys or list(rows[0].keys())
    out = {}
    for key in keys:
        vals = [r[key] for r in rows]
        if isinstance(vals[0], torch.Tensor):
            out[key] = torch.stack(vals)
        else:
            out[key] = torch.as_tensor(np.stack([np.asarray(v) for v in vals]))
    return out


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


@pytest.mark.parametrize("starts", [[0, N_ODD - 2], [-1], [N_ODD]])
def test_out_of_range_starts(base, starts):
    comm, ds = base
    with pytest.raises(ValueError, match="starts"):
        WindowedDataset(ds, 3, starts=starts)


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
            row_of(cat, 2, -1)] == [0, 4, 10, 15, 15]
    for args in ((cat, 3, 0), (cat, 0, 4), (cat, 1, -8)):
        with pytest.raises(IndexError):
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
            exp = (torch.stack([w[0] for w in want]), torch.tensor([w[1] for w in want]))
            bad = bad or same(got, exp, f"pair {i}")
            k = next(k for k in range(3) if s < cat.cumulative_sizes[k])
            bad = bad or ("" if s + 2 * dt < cat.cumulative_sizes[k] else f"crosses file {k}")
        assert_all(comm, not bad, bad)
    finally:
        ds.free()
