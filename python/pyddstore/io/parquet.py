"""Parquet files (pyarrow): one sample per row, one key per column.

Column types (docs/files.md):

- a scalar (bool, uint8, int32, int64, float16, float32, float64): a fixed
  key, 0-d per sample;
- ``fixed_size_list<T, k>`` (nested: ``fixed_size_list<fixed_size_list<T,
  k2>, k1>``): a fixed key ``[k]`` (``[k1, k2]``);
- ``list<T>`` / ``large_list<T>``: a ragged key ``[n]`` (n may be 0);
  ``list<fixed_size_list<T, k>>``: ragged ``[n, k]``;
- ``string`` / ``large_string``: text, read back as ``str``.

Nulls (a null row, or a null inside a list) are a ValueError naming the
column; other types (int16, timestamps, dictionaries, structs, ...) too.

Ranks: the file's row groups are divided among the ranks, each rank whole
groups, contiguous and balanced by rows as well as the groups allow.  When
there are fewer groups than ranks (or a rank would get no rows that way),
the ranks take balanced row ranges instead and read the groups their range
overlaps (a group may then be decoded by two ranks, each keeping its part).
A rank reads its groups of a column one group at a time, copying the flat
values into its shard (pyarrow decodes into its own buffers first); a
ragged column's groups are decoded once for both their lengths (counts())
and their values (read()) while they fit in CACHE_BYTES, else twice.

Each ragged column's total (the data's length, which the ingest checks
the ranks' counts against) comes from the row groups' statistics
(``num_values - null_count`` of the leaf column: exact for files without
nulls); for text columns, and groups written without statistics, every
rank reads the column's lengths once when the file is opened.
"""

import os

import numpy as np

from ._source import Key, Source, need

# column chunks of the rank's groups that counts() keeps for read() (the
# ragged columns: their lengths and values come from one decode when they
# fit, else read() decodes the group again)
CACHE_BYTES = 256 << 20


def _pa():
    need("pyarrow", "parquet", "Parquet files (DistDataset.from_parquet, write_parquet)")
    return need("pyarrow.parquet", "parquet",
                "Parquet files (DistDataset.from_parquet, write_parquet)")


def _bad(path, why):
    return ValueError(f"{path}: {why}")


def _scalar_types(pa):
    return {pa.bool_(): "bool", pa.uint8(): "uint8", pa.int32(): "int32", pa.int64(): "int64",
            pa.float16(): "float16", pa.float32(): "float32", pa.float64(): "float64"}


def _balanced_groups(rows, nranks):
    """Boundaries (group indices, nranks + 1) of contiguous runs of groups,
    every run at least one group, each boundary the one nearest its share
    of the rows."""
    G = len(rows)
    cum = np.concatenate(([0], np.cumsum(rows, dtype=np.int64)))
    total = int(cum[-1])
    b = [0]
    for r in range(1, nranks):
        lo, hi = b[-1] + 1, G - (nranks - r)          # leave a group to every rank after
        target = total * r / nranks
        j = int(np.searchsorted(cum, target))
        best = min((c for c in (j - 1, j) if lo <= c <= hi), default=None,
                   key=lambda c: abs(int(cum[c]) - target))
        b.append(best if best is not None else min(max(j, lo), hi))
    b.append(G)
    return b, cum


def _nleaves(pa, t):
    """The Parquet leaf columns of an arrow type."""
    if pa.types.is_struct(t):
        return sum(_nleaves(pa, t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return _nleaves(pa, t.key_type) + _nleaves(pa, t.item_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t) \
            or getattr(pa.types, "is_list_view", lambda _: False)(t) \
            or getattr(pa.types, "is_large_list_view", lambda _: False)(t):
        return _nleaves(pa, t.value_type)
    if pa.types.is_dictionary(t):
        return 1
    return 1


class ParquetSource(Source):
    """A Parquet file opened on this rank.  columns: the columns to load
    (default: all, in the file's order)."""

    chunked = False      # read(): the rank's whole selection of a column, once

    def __init__(self, path, columns=None):
        self._pq = _pa()
        import pyarrow as pa
        import pyarrow.compute as pc
        self._pa_mod, self._pc = pa, pc
        self.path = str(path)
        if not os.path.exists(self.path):
            raise FileNotFoundError(f"{self.path}: no such file (Parquet)")
        try:
            self._f = self._pq.ParquetFile(self.path)
            md = self._f.metadata
            schema = self._f.schema_arrow
        except Exception as e:  # noqa: BLE001 - pyarrow: ArrowInvalid, OSError, ...
            raise _bad(self.path, f"cannot be opened as a Parquet file ({type(e).__name__}: "
                       f"{e})") from None
        try:
            self._describe(md, schema, columns)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------ describe --
    def _describe(self, md, schema, want):
        pa = self._pa_mod
        self._at = {}        # column -> (lo, hi) of its last counts()
        self._cache = {}     # (column, group) -> the group's column chunk
        self._cached = 0
        names = list(schema.names)
        if want is not None:
            want = [want] if isinstance(want, str) else list(want)
            missing = [c for c in want if c not in names]
            if missing:
                raise KeyError(f"{self.path}: no column(s) {missing} (its columns: {names})")
            names = want
        if not names:
            raise _bad(self.path, "no columns to load")
        self.total = int(md.num_rows)
        self._rows = np.array([md.row_group(g).num_rows for g in range(md.num_row_groups)],
                              dtype=np.int64)
        self._cum = np.concatenate(([0], np.cumsum(self._rows)))
        scalars = _scalar_types(pa)
        self._leaf, j = {}, 0           # each column's first leaf (Parquet's columns)
        for f in schema:
            self._leaf[f.name] = j
            j += _nleaves(pa, f.type)
        self.keys, self._kind = [], {}
        for c in names:
            t = schema.field(c).type
            ragged, inner = False, []
            base = t
            if pa.types.is_list(base) or pa.types.is_large_list(base):
                ragged, base = True, base.value_type
            while pa.types.is_fixed_size_list(base):
                inner.append(base.list_size)
                base = base.value_type
            if pa.types.is_string(t) or pa.types.is_large_string(t):
                self._kind[c] = "str"
                self.keys.append(Key(c, "uint8", "str", (self._total_of(c, None),), 0, "count"))
                continue
            if base not in scalars:
                raise _bad(self.path, f"column '{c}' has type {t}, which ddstore does not "
                           "store: supported are bool, uint8, int32, int64, float16, "
                           "float32, float64 scalars, fixed_size_list and list of them "
                           "(list<fixed_size_list<T, k>> for [n, k]), and string")
            dtype = scalars[base]
            if ragged:
                self._kind[c] = "list"
                k = int(np.prod(inner, dtype=np.int64))
                self.keys.append(Key(c, dtype, "tensor", (self._total_of(c, k),) + tuple(inner),
                                     0, "count"))
            else:
                self._kind[c] = "row"
                self._no_nulls_in_stats(c)
                self.keys.append(Key(c, dtype, "tensor", (self.total,) + tuple(inner), 0, "row"))

    def _leaf_stats(self, c):
        """[(num_values, null_count or None)] of column c's leaf, per group."""
        md = self._f.metadata
        j = self._leaf[c]
        out = []
        for g in range(md.num_row_groups):
            cc = md.row_group(g).column(j)
            st = cc.statistics if cc.is_stats_set else None
            nn = st.null_count if st is not None and st.has_null_count else None
            out.append((int(cc.num_values), None if nn is None else int(nn)))
        return out

    def _no_nulls_in_stats(self, c):
        nulls = sum(n for _, n in self._leaf_stats(c) if n is not None)
        if nulls:
            raise _bad(self.path, f"column '{c}' has {nulls} null value(s): ddstore stores no "
                       "nulls (fill or drop them before loading)")

    def _total_of(self, c, k):
        """Column c's entries (list elements / k, or text bytes) in the whole
        file: from the groups' statistics where they tell it, else read."""
        total = 0
        for g, (nv, nn) in enumerate(self._leaf_stats(c)):
            if k is not None and nn is not None:
                total += (nv - nn) // k if k else 0
            else:
                total += int(self._lengths(self._chunk(c, g, False), c).sum())
        return total

    def describe(self):
        md = self._f.metadata
        return [self.total, [k.describe() for k in self.keys], self._rows.tolist(),
                [md.row_group(g).total_byte_size for g in range(md.num_row_groups)]]

    # --------------------------------------------------------------- split --
    def split(self, nranks):
        """Whole row groups per rank, balanced by rows; balanced row ranges
        when there are fewer groups than ranks (or a rank would get none)."""
        G = len(self._rows)
        if G >= nranks:
            b, cum = _balanced_groups(self._rows, nranks)
            out = [(int(cum[b[r]]), int(cum[b[r + 1]])) for r in range(nranks)]
            if all(hi > lo for lo, hi in out):
                return out
        return Source.split(self, nranks)

    # ---------------------------------------------------------------- read --
    def _chunk(self, c, g, keep):
        got = self._cache.pop((c, g), None)
        if got is not None:
            self._cached -= got.nbytes
            return got
        try:
            arr = self._f.read_row_group(g, columns=[c]).column(0)
        except Exception as e:  # noqa: BLE001 - a damaged file
            raise _bad(self.path, f"column '{c}' of row group {g} cannot be read "
                       f"({type(e).__name__}: {e}); a truncated or damaged file?") from None
        if keep and self._cached + arr.nbytes <= CACHE_BYTES:
            self._cache[(c, g)] = arr
            self._cached += arr.nbytes
        return arr

    def _parts(self, lo, hi):
        """(group, first row, rows) of the groups that rows [lo, hi) overlap."""
        cum = self._cum
        g0 = int(np.searchsorted(cum, lo, side="right")) - 1
        out = []
        g = max(g0, 0)
        while g < len(self._rows) and cum[g] < hi:
            a, b = max(lo, int(cum[g])), min(hi, int(cum[g + 1]))
            if b > a:
                out.append((g, a - int(cum[g]), b - a))
            g += 1
        return out

    def _arrays(self, c, lo, hi, keep=False):
        """Column c's arrays (pyarrow) of rows [lo, hi), one group at a time."""
        for g, a, n in self._parts(lo, hi):
            col = self._chunk(c, g, keep)
            if a or n != len(col):
                col = col.slice(a, n)         # (a partial group: rows < groups' ranks)
            if col.null_count:
                raise _bad(self.path, f"column '{c}' has {col.null_count} null row(s) in row "
                           f"group {g}: ddstore stores no nulls (fill or drop them first)")
            for arr in col.chunks:
                self._no_nulls_inside(arr, c, g)
                yield g, arr

    def _no_nulls_inside(self, arr, c, g):
        """A null inside a list (or a fixed-size list) of one chunk: ValueError."""
        pa = self._pa_mod
        v = arr
        while pa.types.is_list(v.type) or pa.types.is_large_list(v.type) or \
                pa.types.is_fixed_size_list(v.type):
            v = v.flatten()                 # (zero-copy views)
            if v.null_count:
                raise _bad(self.path, f"column '{c}' has {v.null_count} null value(s) inside "
                           f"its lists in row group {g}: ddstore stores no nulls")

    def _lengths(self, col, c):
        """Per-row lengths (list entries, text bytes) of a column's rows."""
        pc = self._pc
        f = pc.binary_length if self._kind[c] == "str" else pc.list_value_length
        return np.asarray(f(col)).astype(np.int64, copy=False)

    def counts(self, key, lo, hi):
        c = key.key
        self._at[c] = (lo, hi)
        if self._kind[c] == "row":
            return np.ones(hi - lo, dtype=np.int64)
        out = [self._lengths(arr, c) for _, arr in self._arrays(c, lo, hi, keep=True)]
        return np.concatenate(out) if out else np.zeros(0, np.int64)

    def _values(self, arr, key, g):
        """The flat numpy values of one chunk (no nulls inside)."""
        kind = self._kind[key.key]
        if kind == "str":
            bufs = arr.buffers()
            it = np.int64 if self._pa_mod.types.is_large_string(arr.type) else np.int32
            off = np.frombuffer(bufs[1], dtype=it)[arr.offset:arr.offset + len(arr) + 1]
            buf = bufs[2]
            if buf is None or len(arr) == 0 or off[-1] == off[0]:
                return np.zeros(0, np.uint8)
            return np.frombuffer(buf, dtype=np.uint8)[off[0]:off[-1]]
        v = arr
        if kind == "list":
            v = v.flatten()
        while self._pa_mod.types.is_fixed_size_list(v.type):
            v = v.flatten()
        if v.null_count:
            raise _bad(self.path, f"column '{key.key}' has {v.null_count} null value(s) "
                       f"inside its lists in row group {g}: ddstore stores no nulls")
        return v.to_numpy(zero_copy_only=False)

    def read(self, key, start, n, out):
        c = key.key
        if c not in self._at:
            raise RuntimeError(f"ParquetSource.read('{c}') before counts() for it")
        lo, hi = self._at.pop(c)
        flat = out.reshape(-1)
        per = int(np.prod(key.inner, dtype=np.int64))
        pos = 0
        for g, arr in self._arrays(c, lo, hi):
            v = self._values(arr, key, g)
            if pos + v.size > flat.size:
                break
            flat[pos:pos + v.size] = v
            pos += v.size
        if pos != n * per:
            raise _bad(self.path, f"column '{c}': rows [{lo}, {hi}) hold {pos // max(per, 1)} "
                       f"entries, not the {n} their lengths sum to")

    def close(self):
        self._cache, self._cached = {}, 0
        f, self._f = getattr(self, "_f", None), None
        if f is not None:
            try:
                f.close()
            except Exception:  # noqa: BLE001 - closing a damaged file
                pass


# ------------------------------------------------------------------ writing --
def _column(pa, k, vals):
    """A pyarrow array of one key's samples (ddstore's mapping, above)."""
    if all(isinstance(v, str) for v in vals):
        return pa.array(vals, type=pa.string())
    if any(isinstance(v, str) for v in vals):
        raise ValueError(f"column {k!r}: some samples are str and some are not")
    arrs = []
    for v in vals:
        if hasattr(v, "detach"):
            v = v.detach().cpu().numpy()
        arrs.append(np.asarray(v))
    dts = {a.dtype.str for a in arrs}
    if len(dts) != 1:
        raise ValueError(f"column {k!r}: samples of different dtypes "
                         f"{sorted({str(a.dtype) for a in arrs})}")
    nds = {a.ndim for a in arrs}
    if len(nds) != 1:
        raise ValueError(f"column {k!r}: samples with different numbers of dims {sorted(nds)}")
    shapes = {a.shape for a in arrs}
    flat = pa.array(np.concatenate([a.reshape(-1) for a in arrs]) if arrs else
                    np.zeros(0, arrs[0].dtype))
    if len(shapes) == 1:                      # fixed: nested fixed-size lists
        shape = arrs[0].shape
        out = flat
        for d in reversed(shape):
            out = pa.FixedSizeListArray.from_arrays(out, int(d))
        return out
    if {a.shape[1:] for a in arrs} != {arrs[0].shape[1:]}:
        raise ValueError(f"column {k!r}: the samples' shapes vary beyond the first dimension "
                         f"({sorted(shapes)[:4]}...): a Parquet list varies in its first")
    inner = arrs[0].shape[1:]
    out = flat
    for d in reversed(inner):
        out = pa.FixedSizeListArray.from_arrays(out, int(d))
    lens = np.array([a.shape[0] for a in arrs], dtype=np.int64)
    offs = np.concatenate(([0], np.cumsum(lens)))
    if offs[-1] < 2 ** 31:
        return pa.ListArray.from_arrays(pa.array(offs.astype(np.int32)), out)
    return pa.LargeListArray.from_arrays(pa.array(offs), out)


def write_parquet(path, samples, columns=None, row_group_size=10_000, **write_kwargs):
    """Write samples (dicts {column: array, tensor, number or str}, the same
    columns in each) as a Parquet file, one row per sample: numbers scalar
    columns, samples of one shape nested fixed_size_lists, samples varying
    in their first dimension list<fixed_size_list...>, str string.  Nothing
    null.  row_group_size: rows per group (the unit ranks divide).
    write_kwargs: pyarrow.parquet.write_table's (compression, ...).  Serial;
    for a dataset converted once and for tests."""
    pq = _pa()
    import pyarrow as pa
    samples = list(samples)
    if not samples:
        raise ValueError("write_parquet: no samples")
    columns = list(samples[0].keys()) if columns is None else list(columns)
    table = pa.table({c: _column(pa, c, [s[c] for s in samples]) for c in columns})
    pq.write_table(table, str(path), row_group_size=row_group_size, **write_kwargs)
