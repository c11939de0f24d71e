"""WindowedDataset (samples made of several stored rows) and row_of."""

import operator

import torch

from ._ext import ext
from .schema import Schema

__all__ = ["WindowedDataset", "WindowRangeError", "row_of"]


class WindowRangeError(IndexError, ValueError):
    """A WindowedDataset start whose window leaves the dataset: an IndexError
    that is also a ValueError (what it was before)."""


class WindowedDataset(torch.utils.data.Dataset):
    """Samples made of several stored rows (time windows, clips).

    WindowedDataset(ds, window, stride=1, dilation=1, starts=None, fields=None):
    sample i is rows s, s+dilation, ..., s+(window-1)*dilation with
    s = i*stride or starts[i]; every field stacked (window, *shape), keeping
    its kind: tensor fields are tensors, numpy array and numpy scalar fields
    numpy arrays, records numpy structured arrays, Python numbers numpy
    arrays (int64 / float64 / bool), as the original.  ``fields`` selects as
    DistDataset's does; with ``fields`` a window is a dict keyed by field (as
    the original).  A batch is one read_rows().
    """

    def __init__(self, ds, window, stride=1, dilation=1, starts=None, fields=None):
        if not hasattr(ds, "read_rows") or not hasattr(ds, "schema"):
            raise TypeError("WindowedDataset needs a DistDataset or DistDatasetReader, got "
                            f"{type(ds).__name__}")
        # the arguments checked (and starts converted) in C++
        (self.window, self.stride, self.dilation, self.span, self._starts,
         self._len) = ext.window_spec(window, stride, dilation, starts, len(ds), WindowRangeError)
        self.ds = ds
        self.schema = ds.schema
        if fields is not None:       # a dict keyed by field, as the original
            sel = ds.schema.select(fields)
            self.schema = Schema("dict", sel.fields, None, len(sel.fields))
        if self.schema.ragged:
            raise ValueError(f"WindowedDataset: field(s) {[f.key for f in self.schema.ragged]!r} "
                             "are ragged; windows stack fixed-size rows (select fixed "
                             "fields with fields=)")
        self._keys = self.schema.keys

    def __len__(self):
        return self._len

    @property
    def ddstore(self):
        return self.ds.ddstore

    @property
    def shapes(self):
        """{key: (window, *field shape)}, tuples of ints."""
        return {f.key: (self.window,) + tuple(int(d) for d in f.shape)
                for f in self.schema.fields}

    @property
    def dtypes(self):
        """{key: dtype name} as DistDataset.dtypes."""
        return {f.key: f.dtype_name() for f in self.schema.fields}

    def _windows(self, indices):
        """Per field, the batch of windows (n, window, *shape): tensors
        (records: numpy structured arrays); the rows mapped in C++."""
        rows, n = ext.window_rows(indices, self._len, self._starts, self.stride,
                                  self.dilation, self.window)
        got = self.ds.read_rows(rows, fields=self._keys)
        out = []
        for f in self.schema.fields:
            v = got[f.key]
            out.append(v.reshape((n, self.window) + tuple(v.shape[1:])))
        return out

    def _per_sample(self, vals):
        """Per field, the list of per-sample windows, of the field's kind."""
        cols = []
        for f, v in zip(self.schema.fields, vals):
            if f.kind in ("ndarray", "npscalar", "int", "float", "bool"):
                a = v.numpy() if v.device.type == "cpu" else v.cpu().numpy()
                cols.append(list(a))
            elif isinstance(v, torch.Tensor):
                cols.append(list(v.unbind(0)))
            else:
                cols.append(list(v))
        return cols

    def __getitem__(self, i):
        i = operator.index(i)
        return self.schema.build([c[0] for c in self._per_sample(self._windows([i]))])

    def __getitems__(self, indices):
        return self.schema.build_many(self._per_sample(self._windows(indices)))

    def read_rows(self, rows, fields=None, out=None):
        return self.ds.read_rows(rows, fields=fields, out=out)

    def get_profile(self, field=None):
        return self.ds.get_profile(field)

    # direct collate: one read_rows per batch, already in batch form
    def _fast_collate_ok(self):
        return not self.schema.has_records

    def _collate(self, indices, pin_memory=False, out=None):
        vals = self._windows(indices)
        if pin_memory:
            vals = [v.pin_memory() if isinstance(v, torch.Tensor) and v.device.type == "cpu"
                    else v for v in vals]
        return self.schema.build_batch(vals)

    def _store_datasets(self):
        return self.ds._store_datasets()


def row_of(concat, source, index):
    """In a DistDataset over the ConcatDataset `concat`, the row of sample
    `index` of `concat.datasets[source]`.  `source` and `index` must be in
    range: a negative or too large one is an IndexError (no counting from
    the end: a window start computed past a file's beginning must not land
    in that file's tail)."""
    datasets = concat.datasets
    source = operator.index(source)
    if not 0 <= source < len(datasets):
        raise IndexError(f"row_of: source {source} out of range [0, {len(datasets)})")
    n = len(datasets[source])
    index = operator.index(index)
    if not 0 <= index < n:
        raise IndexError(f"row_of: index {index} out of range [0, {n}) of source "
                         f"{source}")
    start = concat.cumulative_sizes[source - 1] if source > 0 else 0
    return start + index
