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

from ._ext import ext

__all__ = ["RowLayout", "META_KEY", "layout_of"]

META_KEY = "packed"


class RowLayout:
    """Where each packed field lives in the row of the packed variable (the
    arithmetic and, for a layout read back with its `row_bytes`, the checks:
    the extension's pack_layout, ValueError when a field does not fit).

    Sets ``f.var`` (the packed variable) and ``f.offset`` of every field it
    packs."""

    def __init__(self, var, fields, row_bytes=None):
        self.var = var
        self.fields = list(fields)
        offs, self.row_bytes = ext.pack_layout(
            [(f.key, f.nbytes, 1 if f.kind == "record" else f.np_dtype.itemsize, f.offset)
             for f in self.fields], row_bytes)
        for f, off in zip(self.fields, offs):
            f.offset, f.var = off, var
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
