"""HDF5 files (h5py): a group's datasets as the keys of its samples.

Layout of group G (ddstore's; docs/files.md):

``G/<key>``, a dataset ``[N, ...]``
    a *fixed* key: sample i is row i (shape ``[...]``; an ``[N]`` dataset
    gives 0-d tensors).  Any such dataset of the group, chunked or
    compressed, as h5py reads it.
``G/<key>/``, a subgroup
    a *ragged* key (HydraGNN's ADIOS layout in HDF5 terms):

    - dataset ``values``: every sample's array concatenated along dimension
      ``variable_dim``;
    - dataset ``counts``: int64 ``[N]``, each sample's size along it (0 for
      an empty sample);
    - dataset ``offsets`` (optional): int64 ``[N]``, each sample's start
      along it; checked against the counts' prefix sums when present;
    - attribute ``variable_dim`` (integer, default 0);
    - attribute ``text`` (optional, 1): ``values`` is uint8 ``[total]``
      holding each sample's UTF-8 text, read back as ``str``.

Every key has the same N (the samples).  Types: bool, uint8, int32, int64,
float16, float32, float64 (either byte order); others are a ValueError that
names the dataset.  Every rank opens the file read-only and reads its own
hyperslab of each key (one selection per key, into the shard in place).
"""

import os

import numpy as np

from ._source import DTYPES, Key, Source, check_prefix, need


def _h5py():
    return need("h5py", "hdf5", "HDF5 files (DistDataset.from_hdf5, write_hdf5)")


def _bad(path, why):
    return ValueError(f"{path}: {why}")


def _dtype_name(path, name, dt):
    """The DTYPES name of an h5py dataset's dtype, or ValueError naming it."""
    dt = np.dtype(dt)
    if dt.names is None and dt.subdtype is None and dt.kind in "biuf":
        n = dt.newbyteorder("=").name
        if n in DTYPES:
            return n
    raise _bad(path, f"dataset '{name}' has type {dt} (h5py), which ddstore does not "
               f"store: supported are {', '.join(DTYPES)}")


def _group_path(group):
    g = "/" + str(group).strip("/")
    return g


class Hdf5Source(Source):
    """HDF5 group `group` of the file at `path` (ddstore's layout, above),
    opened read-only on this rank.  keys: the keys to load (default: every
    member of the group, in the group's order: the order they were created
    in when the file tracks it, as write_hdf5's do, else by name)."""

    def __init__(self, path, group, keys=None):
        h5py = _h5py()
        self.path, self.group = str(path), _group_path(group)
        if not os.path.exists(self.path):
            raise FileNotFoundError(f"{self.path}: no such file (HDF5)")
        try:
            self._f = h5py.File(self.path, "r")
        except Exception as e:  # noqa: BLE001 - h5py raises OSError, sometimes others
            raise _bad(self.path, f"cannot be opened as an HDF5 file ({e})") from None
        self._h5py = h5py
        try:
            self._describe(keys)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------ describe --
    def _describe(self, want):
        h5py, G = self._h5py, self.group
        try:
            g = self._f[G]
        except KeyError:
            raise KeyError(f"{self.path}: no group '{G}'") from None
        except Exception as e:  # noqa: BLE001
            raise _bad(self.path, f"group '{G}' cannot be read ({e})") from None
        if not isinstance(g, h5py.Group):
            raise _bad(self.path, f"'{G}' is a dataset, not a group (from_hdf5 takes the "
                       "group that holds the keys)")
        names = list(g.keys())
        if want is not None:
            want = [want] if isinstance(want, str) else list(want)
            missing = [k for k in want if k not in names]
            if missing:
                raise KeyError(f"{self.path}: group '{G}' has no key(s) {missing} "
                               f"(its keys: {names})")
            names = want
        if not names:
            raise _bad(self.path, f"group '{G}' has no datasets (no keys to load)")
        self._ds, self._offsets, self.keys, ns = {}, {}, [], []
        for k in names:
            obj = g.get(k)
            full = f"{G.rstrip('/')}/{k}"
            if isinstance(obj, h5py.Dataset):
                key, n = self._fixed(full, k, obj)
            elif isinstance(obj, h5py.Group):
                key, n = self._ragged(full, k, obj)
            else:
                raise _bad(self.path, f"'{full}' is neither a dataset nor a group "
                           f"({type(obj).__name__})")
            self.keys.append(key)
            ns.append((k, n))
        counts = {n for _, n in ns}
        if len(counts) != 1:
            raise _bad(self.path, f"the keys of group '{G}' have different numbers of "
                       f"samples: {', '.join(f'{k}: {n}' for k, n in ns)}")
        self.total = counts.pop()

    def _fixed(self, full, k, ds):
        if ds.shape is None or len(ds.shape) == 0:
            raise _bad(self.path, f"dataset '{full}' is a scalar: a fixed key is a dataset "
                       "whose first axis is the samples ([N, ...])")
        dtype = _dtype_name(self.path, full, ds.dtype)
        self._ds[k] = ds
        return Key(k, dtype, "tensor", ds.shape, 0, "row"), int(ds.shape[0])

    def _ragged(self, full, k, grp):
        h5py = self._h5py
        parts = {}
        for part in ("values", "counts"):
            d = grp.get(part)
            if not isinstance(d, h5py.Dataset):
                raise _bad(self.path, f"'{full}' is a group but not a ragged key of "
                           f"ddstore's layout: it has no dataset '{part}' (a ragged key "
                           "holds 'values', int64 'counts' and attribute 'variable_dim')")
            parts[part] = d
        values, counts = parts["values"], parts["counts"]
        shape = tuple(values.shape or ())
        dim = grp.attrs.get("variable_dim", 0)
        try:
            dim = int(np.asarray(dim).reshape(-1)[0])
        except (TypeError, ValueError, IndexError):
            raise _bad(self.path, f"'{full}' attribute 'variable_dim' is {dim!r}, not an "
                       "integer") from None
        if not shape or not 0 <= dim < len(shape):
            raise _bad(self.path, f"'{full}' attribute 'variable_dim' is {dim}, but "
                       f"'{full}/values' has shape {list(shape)}")
        dtype = _dtype_name(self.path, f"{full}/values", values.dtype)
        c_shape = tuple(counts.shape or ())
        if np.dtype(counts.dtype).newbyteorder("=") != np.int64 or len(c_shape) != 1:
            raise _bad(self.path, f"'{full}/counts' must be int64 [N] (one entry per sample), "
                       f"is {counts.dtype} {list(c_shape)}")
        n = int(c_shape[0])
        off = grp.get("offsets")
        if off is not None:
            o_shape = tuple(getattr(off, "shape", None) or ())
            if (not isinstance(off, h5py.Dataset) or o_shape != (n,)
                    or np.dtype(off.dtype).newbyteorder("=") != np.int64):
                raise _bad(self.path, f"'{full}/offsets' must be int64 [{n}] (as "
                           f"'{full}/counts'), is {getattr(off, 'dtype', type(off).__name__)} "
                           f"{list(o_shape)}")
            self._offsets[k] = off
        kind = "tensor"
        if int(np.asarray(grp.attrs.get("text", 0)).reshape(-1)[0]):
            if dtype != "uint8" or len(shape) != 1:
                raise _bad(self.path, f"'{full}' has attribute text=1 (UTF-8 text) but its "
                           f"values are {dtype} {list(shape)}: text keys are uint8 1-D")
            kind = "str"
        self._ds[k] = values
        self._ds[(k, "counts")] = counts
        return Key(k, dtype, kind, shape, dim, "count"), n

    def describe(self):
        return [self.total, [k.describe() for k in self.keys], sorted(self._offsets)]

    # ---------------------------------------------------------------- read --
    def _read(self, ds, sel, out, what):
        try:
            ds.read_direct(out, source_sel=sel)
        except Exception as e:  # noqa: BLE001 - a damaged file: OSError, RuntimeError...
            raise _bad(self.path, f"'{what}' cannot be read ({type(e).__name__}: {e}); a "
                       "truncated or damaged file?") from None

    def _name(self, key, part=None):
        base = f"{self.group.rstrip('/')}/{key.key}"
        return base if part is None else f"{base}/{part}"

    def counts(self, key, lo, hi):
        if key.per_sample == "row":
            return np.ones(hi - lo, dtype=np.int64)
        out = np.empty(hi - lo, dtype=np.int64)
        if hi > lo:
            self._read(self._ds[(key.key, "counts")], np.s_[lo:hi], out,
                       self._name(key, "counts"))
        return out

    def check_starts(self, key, lo, hi, start, counts):
        off = self._offsets.get(key.key)
        if off is None or hi <= lo:
            return
        got = np.empty(hi - lo, dtype=np.int64)
        self._read(off, np.s_[lo:hi], got, self._name(key, "offsets"))
        check_prefix(self.path, self._name(key, "offsets"), lo, got, start, counts)

    def read(self, key, start, n, out):
        sel = tuple(slice(start, start + n) if d == key.dim else slice(None)
                    for d in range(len(key.shape)))
        self._read(self._ds[key.key], sel, out,
                   self._name(key) if key.per_sample == "row" else self._name(key, "values"))

    def close(self):
        f, self._f = getattr(self, "_f", None), None
        self._ds = {}
        if f is not None:
            try:
                f.close()
            except Exception:  # noqa: BLE001 - closing a damaged file
                pass


# ------------------------------------------------------------------ writing --
def _as_array(v):
    if hasattr(v, "detach"):
        v = v.detach().cpu().numpy()
    return np.asarray(v)


def write_hdf5_columns(path, group, columns, ndata, text=(), offsets=False, mode="w",
                       **dataset_kwargs):
    """Write group `group` of an HDF5 file in ddstore's layout from whole
    columns.

    columns: {key: column}, in the order to keep: an array ``[ndata, ...]``
    for a fixed key (row i is sample i), or a tuple ``(values, counts)`` /
    ``(values, counts, dim)`` for a ragged key (`values` every sample's
    array concatenated along `dim`, default 0; `counts` each sample's size
    along it, ndata entries).  text: the ragged keys whose uint8 values hold
    UTF-8 text (read back as str).  offsets: also write each ragged key's
    ``offsets``.  mode: h5py's file mode ("w" creates the file, "a" adds
    the group to an existing one).  dataset_kwargs: h5py create_dataset's
    (chunks, compression, ...).  Serial (one process writes the file)."""
    h5py = _h5py()
    ndata = int(ndata)
    text = {text} if isinstance(text, str) else set(text)
    unknown = text - set(columns)
    if unknown:
        raise ValueError(f"write_hdf5_columns: text= names keys that are not columns: "
                         f"{sorted(unknown)}")
    with h5py.File(str(path), mode, track_order=True) as f:
        G = _group_path(group)
        g = f if G == "/" else f.create_group(G, track_order=True)
        for k, col in columns.items():
            if isinstance(col, tuple):
                if len(col) not in (2, 3):
                    raise ValueError(f"key {k!r}: a ragged column is (values, counts) or "
                                     f"(values, counts, dim), got {len(col)} items")
                values = np.ascontiguousarray(_as_array(col[0]))
                counts = np.ascontiguousarray(_as_array(col[1]), dtype=np.int64)
                dim = int(col[2]) if len(col) == 3 else 0
                if values.ndim == 0 or not 0 <= dim < values.ndim:
                    raise ValueError(f"key {k!r}: dim {dim} for values of shape "
                                     f"{list(values.shape)}")
                if counts.shape != (ndata,) or int(counts.sum()) != values.shape[dim] or \
                        (ndata and int(counts.min()) < 0):
                    raise ValueError(f"key {k!r}: counts must be {ndata} entries >= 0 summing "
                                     f"to the values' size {values.shape[dim]} along dim {dim}")
                _dtype_name(str(path), f"{G}/{k}/values", values.dtype)
                if k in text and (values.dtype != np.uint8 or values.ndim != 1):
                    raise ValueError(f"key {k!r}: text values must be uint8 1-D")
                sub = g.create_group(k, track_order=True)
                sub.attrs["variable_dim"] = np.int64(dim)
                if k in text:
                    sub.attrs["text"] = np.int64(1)
                sub.create_dataset("values", data=values, **dataset_kwargs)
                sub.create_dataset("counts", data=counts)
                if offsets:
                    sub.create_dataset("offsets", data=np.concatenate(
                        ([0], np.cumsum(counts)[:-1])).astype(np.int64))
            else:
                a = np.ascontiguousarray(_as_array(col))
                if a.ndim == 0 or a.shape[0] != ndata:
                    raise ValueError(f"key {k!r}: a fixed column is an array [{ndata}, ...], "
                                     f"got shape {list(a.shape)}")
                if k in text:
                    raise ValueError(f"key {k!r}: text keys are ragged (values, counts)")
                _dtype_name(str(path), f"{G}/{k}", a.dtype)
                g.create_dataset(k, data=a, **dataset_kwargs)


def write_hdf5(path, group, samples, keys=None, ragged=(), offsets=False, mode="w",
               **dataset_kwargs):
    """Write samples (dicts {key: array, tensor, number or str}, the same
    keys in each) as group `group` of an HDF5 file in ddstore's layout.  A
    key whose samples all have the same shape is a fixed dataset [N, ...]
    (numbers: [N]), unless named in `ragged`; else a ragged key, whose
    samples must have the same number of dims and vary in at most one (the
    one recorded as variable_dim); str keys are ragged UTF-8 text.  Serial;
    for a dataset converted once and for tests (a big one:
    write_hdf5_columns)."""
    from .adios import _column_of      # one rule for a ragged key's layout
    samples = list(samples)
    if not samples:
        raise ValueError("write_hdf5: no samples")
    keys = list(samples[0].keys()) if keys is None else list(keys)
    ragged = {ragged} if isinstance(ragged, str) else set(ragged)
    cols, text = {}, []
    for k in keys:
        vals = [s[k] for s in samples]
        strs = [isinstance(v, str) for v in vals]
        if any(strs):
            if not all(strs):
                raise ValueError(f"key {k!r}: some samples are str and some are not")
            text.append(k)
        else:
            vals = [_as_array(v) for v in vals]
            if k not in ragged and len({(a.shape, a.dtype.str) for a in vals}) == 1:
                cols[k] = np.stack(vals)
                continue
            if len({a.dtype.str for a in vals}) != 1:
                raise ValueError(f"key {k!r}: samples of different dtypes "
                                 f"{sorted({str(a.dtype) for a in vals})}")
        values, dim, counts = _column_of(vals, k)
        cols[k] = (values, counts, dim)
    write_hdf5_columns(path, group, cols, len(samples), text=text, offsets=offsets, mode=mode,
                       **dataset_kwargs)
