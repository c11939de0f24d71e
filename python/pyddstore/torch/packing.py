"""One row per sample: the fixed fields of a sample packed into one row.

DistDataset(pack_fields=True) stores every fixed-shape field of a sample in
one row of one store variable, ``{name}/packed`` (uint8 rows): each field's
bytes at its offset, aligned to its element size, fields in sample order,
the row padded to a multiple of 8 bytes (so every row of a batch buffer is
aligned).  A batch is then one planned read of that variable (one remote
read per run of consecutive rows per owner) into a row buffer, scattered
into the fields' batch tensors by the torch extension (rowpack.cpp).

Ragged fields keep their own variables alongside the packed row (their
sizes vary per sample: one ragged read each).

The layout is recorded in the method-2 meta file: ``"packed": {"var",
"row_bytes"}`` and an ``"offset"`` in every packed field's description;
``vars`` lists the packed variable first, then the ragged ones in field
order.
"""

import numpy as np

__all__ = ["RowLayout", "META_KEY", "layout_of", "layout_from_meta"]

META_KEY = "packed"
ROW_ALIGN = 8


def _align(off, a):
    return (off + a - 1) // a * a


def _elem_align(f):
    """A field's alignment in the row: its element size (records: 1, stored
    as bytes)."""
    return 1 if f.kind == "record" else f.np_dtype.itemsize


class RowLayout:
    """Where each packed field lives in the row of the packed variable.

    Sets ``f.var`` (the packed variable) and ``f.offset`` of every field it
    packs."""

    def __init__(self, var, fields, row_bytes=None):
        self.var = var
        self.fields = list(fields)
        off = 0
        for f in self.fields:
            if f.offset is None:
                f.offset = _align(off, _elem_align(f))
            off = f.offset + f.nbytes
            f.var = var
        need = _align(max(off, 1), ROW_ALIGN)
        self.row_bytes = need if row_bytes is None else int(row_bytes)
        self._offs = {f.key: f.offset for f in self.fields}

    def spec(self, fields):
        """The (variable, row_bytes, offsets) the extension takes for these
        packed fields, in this order."""
        return (self.var, self.row_bytes, [self._offs[f.key] for f in fields])

    def describe(self):
        return {"var": self.var, "row_bytes": self.row_bytes}

    # -- loading ---------------------------------------------------------
    def buffer(self, n):
        """(rows (n, row_bytes) uint8 zeroed, per-field writable views
        (n, *row_shape) of the fields' storage dtype into it)."""
        rows = np.zeros((n, self.row_bytes), dtype=np.uint8)
        return rows, [self.view(rows, f) for f in self.fields]

    def view(self, rows, f):
        """Field f of every row of `rows` as an array (n, *row_shape) that
        shares its memory (never a copy: a write must land in the row)."""
        n = rows.shape[0]
        col = rows[:, f.offset:f.offset + f.nbytes]
        isz = f.np_dtype.itemsize
        strides, step = [], isz
        for d in reversed(f.row_shape):
            strides.append(step)
            step *= d
        # as_strided: always a view (a reshape may silently copy)
        return np.lib.stride_tricks.as_strided(
            col.view(f.np_dtype), shape=(n,) + tuple(f.row_shape),
            strides=(rows.strides[0],) + tuple(reversed(strides)), writeable=True)

    def __repr__(self):
        return (f"RowLayout({self.var!r}, {self.row_bytes} bytes: "
                + ", ".join(f"{f.key!r}@{f.offset}+{f.nbytes}" for f in self.fields) + ")")


def layout_of(name, schema):
    """The layout of a dataset's fixed fields (in sample order), or None when
    it has none."""
    fixed = [f for f in schema.fields if f.axis is None]
    if not fixed:
        return None
    for f in fixed:
        f.offset = None
    return RowLayout(f"{name}/packed", fixed)


def layout_from_meta(meta, path, bad):
    """(field index -> variable name) list and the packing description
    (None when the meta file is not packed), validated; `bad(field, why)`
    makes the ValueError naming the meta file."""
    desc = meta["schema"]["fields"]
    vars_ = meta["vars"]
    pk = meta.get(META_KEY)
    if pk is None:
        if any(type(d) is dict and "offset" in d for d in desc):
            raise bad("schema", "has packed field offsets but no 'packed' layout")
        if len(desc) != len(vars_):
            raise bad("vars", f"has {len(vars_)} names for {len(desc)} schema fields")
        return list(vars_), None
    if type(pk) is not dict or type(pk.get("var")) is not str or \
            type(pk.get("row_bytes")) is not int or pk["row_bytes"] < 1:
        raise bad(META_KEY, "must be an object with 'var' (a string) and 'row_bytes' (an "
                  "integer >= 1)")
    if not vars_ or vars_[0] != pk["var"]:
        raise bad("vars", f"must start with the packed variable {pk['var']!r}"[:300])
    unpacked = [i for i, d in enumerate(desc) if type(d) is dict and "offset" not in d]
    if len(vars_) != 1 + len(unpacked):
        raise bad("vars", f"has {len(vars_)} names for the packed variable and "
                  f"{len(unpacked)} unpacked fields")
    out = [pk["var"]] * len(desc)
    for j, i in enumerate(unpacked):
        out[i] = vars_[1 + j]
    return out, pk


def check_layout(layout_fields, row_bytes, path, bad):
    """Packed fields read back from a meta file fit their row: offsets
    aligned, inside the row, not overlapping."""
    spans = []
    for f in layout_fields:
        off = f.offset
        if type(off) is not int or off < 0 or off % _elem_align(f) or \
                off + f.nbytes > row_bytes:
            raise bad("schema", f"field {f.key!r}: offset {off!r} ({f.nbytes} bytes) does not "
                      f"fit a packed row of {row_bytes} bytes aligned to "
                      f"{_elem_align(f)}"[:300])
        spans.append((off, off + f.nbytes, f.key))
    spans.sort()
    for (a0, a1, ka), (b0, b1, kb) in zip(spans, spans[1:]):
        if b0 < a1:
            raise bad("schema", f"packed fields {ka!r} and {kb!r} overlap"[:300])
