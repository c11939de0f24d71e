"""Random DistDatasets against their source (issue 11's torch layer).

Each seed draws a dataset of 1-4 tensor fields of random dtype (bfloat16 and
float16 included), 1-3 dims and sizes, most of them ragged along a random axis
(samples of 0-8 along it), the others fixed, and checks every read against the
source's own samples: `ds[i]`, `__getitems__`, and whole shuffled epochs of
`ThreadDataLoader` with 0 and 2 workers in both batch layouts (packed: values
concatenated along the field's axis, lengths, offsets and batch; padded:
values and mask) against torch's `DataLoader` order with the same generator.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import pyddstore  # noqa: E402
from _torch_util import assert_all, fresh_name, require_method, world  # noqa: E402
from pyddstore.torch import DistDataset, ThreadDataLoader  # noqa: E402

DTYPES = [torch.float32, torch.int64, torch.float16, torch.uint8, torch.float64, torch.int32,
          torch.bfloat16]


class _Random(torch.utils.data.Dataset):
    def __init__(self, seed):
        g = np.random.default_rng(seed)
        self.n = int(g.integers(20, 90))
        self.spec = []
        for k in range(int(g.integers(1, 5))):
            ndim = int(g.integers(1, 4))
            shape = [int(g.integers(1, 5)) for _ in range(ndim)]
            axis = int(g.integers(ndim)) if g.random() < 0.7 else None
            self.spec.append((f"f{k}", DTYPES[g.integers(len(DTYPES))], shape, axis))
        self.lens = g.integers(0, 9, (self.n, len(self.spec)))

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        d = {}
        for k, (name, dt, shape, axis) in enumerate(self.spec):
            s = list(shape)
            if axis is not None:
                s[axis] = int(self.lens[i, k])
            v = (torch.arange(int(np.prod(s)), dtype=torch.float64) * 3 + i * 7 + k) % 100
            d[name] = v.to(dt).reshape(s)
        return d


def _eq(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def _check_batch(spec, batch, samples, layout):
    """What is wrong with one batch (a list of strings)."""
    bad = []
    for name, _, _, axis in spec:
        vs = [s[name] for s in samples]
        x = batch[name]
        if axis is None:
            if not _eq(x, torch.stack(vs)):
                bad.append(f"{name} (fixed)")
            continue
        ln = torch.tensor([v.shape[axis] for v in vs])
        if layout == "packed":
            ok = (_eq(x.values, torch.cat(vs, dim=axis)) and torch.equal(x.lengths, ln) and
                  torch.equal(x.offsets, torch.cat([torch.zeros(1, dtype=torch.long),
                                                    ln.cumsum(0)])) and
                  torch.equal(x.batch, torch.repeat_interleave(torch.arange(len(vs)), ln)))
        else:
            ok = tuple(x.mask.shape) == (len(vs), int(ln.max()))
            for q, v in enumerate(vs):
                sl = [slice(None)] * v.dim()
                sl[axis] = slice(0, v.shape[axis])
                ok = ok and _eq(x.values[q][tuple(sl)], v) and \
                    x.values[q].shape[axis] == int(ln.max()) and \
                    int(x.mask[q].sum()) == v.shape[axis]
        if not ok:
            bad.append(f"{name} ({layout}, axis {axis})")
    return bad


@pytest.mark.parametrize("seed", [4, 6, 13])
@pytest.mark.parametrize("layout", ["packed", "padded"])
def test_random_dataset_reads_match_source(seed, layout):
    comm = world()
    method = seed % 2
    require_method(method, comm)
    src = _Random(seed)
    ragged = {name: axis for name, _, _, axis in src.spec if axis is not None}
    ds = DistDataset(src, fresh_name("rnd"), comm, method=method, ragged=ragged or False,
                     ragged_batch=layout)
    rng = np.random.default_rng(seed + comm.Get_rank())
    bad = []
    for i in rng.integers(0, len(src), 10).tolist():
        bad += [f"ds[{i}][{k}]" for k, v in src[i].items() if not _eq(ds[i][k], v)]
    idx = rng.integers(0, len(src), 17).tolist()
    for j, s in zip(idx, ds.__getitems__(idx)):
        bad += [f"__getitems__ {j} {k}" for k, v in src[j].items() if not _eq(s[k], v)]
    for workers in (0, 2):
        bs = int(rng.integers(1, 9))
        loader = ThreadDataLoader(ds, batch_size=bs, shuffle=True, num_workers=workers,
                                  generator=torch.Generator().manual_seed(seed))
        ref = torch.utils.data.DataLoader(src, batch_size=bs, shuffle=True,
                                          generator=torch.Generator().manual_seed(seed),
                                          collate_fn=lambda x: x)
        got = list(loader)
        loader.close()
        want = list(ref)
        if len(got) != len(want):
            bad.append(f"{workers} workers: {len(got)} batches, expected {len(want)}")
        for k, (b, samples) in enumerate(zip(got, want)):
            bad += [f"{workers} workers, batch {k}: {w}"
                    for w in _check_batch(src.spec, b, samples, layout)]
    ds.free()
    assert_all(comm, not bad, f"dataset {src.spec}: {bad[:5]}")
