"""Sample schemas: how a dataset's samples map onto store variables.

A sample is a value, a tuple / list / namedtuple of values, or a dict of
values (or a torch_geometric Data).  Each value is a *field*, stored as one
variable with one row per sample; its kind, shape and dtype come from the
first sample and must not change.  Kinds (the table of what is stored and
read back: docs/reference-torch.md, "Samples, fields and dtypes"): tensor,
ndarray, npscalar, bool, int (int64), float (float64), record (numpy
structured values, stored as their bytes), and str (text a file held,
DistDataset.from_adios: its UTF-8 bytes, a ragged uint8 field, read back
as str).  A ragged field (tensor or
ndarray varying along one axis, DistDataset(ragged=...)) has -1 at that
axis in Field.shape (Field.axis) and one *element row* (row_shape, disp)
per index along it.
"""


import numpy as np
import torch

from ._ext import ext

__all__ = ["Field", "Schema", "SUPPORTED", "classify", "UnknownFieldError",
           "RAGGED_KINDS"]

# kinds whose shape may vary along one axis (ragged fields)
RAGGED_KINDS = ("tensor", "ndarray")


class UnknownFieldError(KeyError, ValueError):
    """A field key that the dataset does not have: a KeyError (read_rows,
    alloc, get_profile look fields up by key) that is also a ValueError (a bad
    ``fields=`` argument, as it always was)."""

    def __str__(self):          # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


SUPPORTED = ("bool", "uint8", "int32", "int64", "float16", "bfloat16", "float32",
             "float64")
# numpy has no bfloat16: its host storage is int16 (the same bits), and only
# tensors hold it
_NP_STORAGE = {name: np.dtype("int16" if name == "bfloat16" else name)
               for name in SUPPORTED}
_TORCH = {"bool": torch.bool, "uint8": torch.uint8, "int32": torch.int32,
          "int64": torch.int64, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "float32": torch.float32, "float64": torch.float64}


def classify(value, where):
    """(kind, shape, dtype name, record dtype, record class) of one value
    (the extension's classify; TypeError for what cannot be stored)."""
    return ext.classify(value, where)


class Field:
    """One field of a sample: one store variable."""

    __slots__ = ("key", "kind", "shape", "dtype", "rdtype", "rclass", "var",
                 "np_dtype", "torch_dtype", "row_shape", "disp", "nbytes", "axis",
                 "offset")

    def __init__(self, key, kind, shape, dtype, rdtype=None, rclass=None, var=None,
                 axis=None):
        self.key = key
        self.kind = kind
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtype                      # storage dtype name
        self.rdtype = rdtype                    # record dtype (np.dtype) or None
        self.rclass = rclass                    # "void" | "ndarray" | "recarray"
        self.var = var
        self.axis = axis                        # ragged: the varying axis; fixed: None
        self.offset = None                      # packed (packing.py): bytes into the row
        self.np_dtype = _NP_STORAGE[dtype]      # host storage while loading
        self.torch_dtype = _TORCH[dtype]
        # ragged: shape has -1 at `axis`; one element row = the other dims
        if kind == "str" and (dtype != "uint8" or self.shape != (-1,) or axis != 0):
            raise ValueError(f"field {key!r}: a str field is uint8 of shape (-1,) along "
                             f"axis 0, got {dtype} {self.shape} axis {axis}")
        # str: text from a file (pyddstore.io), stored as its UTF-8 bytes
        self.row_shape, self.disp, self.nbytes = ext.field_layout(
            key, "tensor" if kind == "str" else kind, self.shape,
            rdtype.itemsize if kind == "record" else self.np_dtype.itemsize, axis)

    # -- description (exchanged across ranks, written to {name}.meta.json) --
    def describe(self):
        d = {"key": self.key, "kind": self.kind, "shape": list(self.shape),
             "dtype": self.dtype}
        if self.kind == "record":
            d["descr"] = np.lib.format.dtype_to_descr(self.rdtype)
            d["rclass"] = self.rclass
        if self.axis is not None:
            d["axis"] = self.axis
        if self.offset is not None:
            d["offset"] = self.offset
        return d

    @classmethod
    def from_description(cls, d, var=None):
        """The field of a description (its axis and offset checked by the
        extension's meta_check)."""
        rdtype = None
        if d["kind"] == "record":
            rdtype = np.lib.format.descr_to_dtype(_tuplify(d["descr"]))
        f = cls(d["key"], d["kind"], d["shape"], d["dtype"], rdtype, d.get("rclass"), var,
                d.get("axis"))
        f.offset = d.get("offset")
        return f

    @property
    def ragged(self):
        return self.axis is not None

    def dtype_name(self):
        """The field's element type as a string (ds.dtypes, as the original):
        the stored dtype's name ('float32', 'int64', 'bfloat16', ...; Python
        int / float / bool are stored as 'int64' / 'float64' / 'bool'); a
        record's structured np.dtype (the samples' .dtype), as the original."""
        if self.kind == "record":
            return self.rdtype
        return self.dtype

    def matches(self, value, where):
        """Raise ValueError/TypeError if `value` does not fit this field."""
        kind, shape, dtype, rdtype, rclass = classify(value, where)
        if kind != self.kind or dtype != self.dtype or shape != self.shape or \
                (kind == "record" and (rdtype != self.rdtype or rclass != self.rclass)):
            raise ValueError(
                f"{where}: {_desc(kind, shape, dtype, rdtype, rclass)} differs from the "
                f"first sample's {_desc(self.kind, self.shape, self.dtype, self.rdtype, self.rclass)}"
                "; shapes and dtypes must be fixed across samples (DistDataset(ragged=True) "
                "stores tensor/ndarray fields whose size varies along one axis)")

    def __repr__(self):
        return f"Field({self.key!r}, {_desc(self.kind, self.shape, self.dtype, self.rdtype, self.rclass)})"

    # -- values ------------------------------------------------------------
    def for_store(self, a):
        """What the store gets for host storage `a` (np_dtype): `a` itself, or
        for bfloat16 a tensor view of its bits (the store's dtype then is
        bfloat16, not int16)."""
        if self.dtype == "bfloat16":
            return torch.from_numpy(a).view(torch.bfloat16)
        return a

    def records(self, t):
        """A batch tensor of record bytes as a structured array (n, *shape)."""
        a = t.numpy() if t.device.type == "cpu" else t.cpu().numpy()
        n = a.shape[0]
        recs = a.view(self.rdtype).reshape((n,) + self.shape)
        if self.rclass == "recarray":
            recs = recs.view(np.recarray)
        return recs

    def batch_value(self, t):
        """The collated form of a batch tensor: tensors, records as arrays."""
        if self.kind == "record":
            return self.records(t)
        return t



def _pyg_data():
    try:
        from torch_geometric.data import Data
    except ImportError as e:
        raise ImportError("this dataset was stored from torch_geometric Data samples; "
                          f"reading them back needs torch_geometric ({e})") from e
    return Data


def _selected(keys, have):
    """fields=: the keys (one key or an iterable of them) checked against the
    sample's keys `have` (the extension's select_keys)."""
    return ext.select_keys(keys, list(have), UnknownFieldError)


def _tuplify(x):
    if isinstance(x, list):
        return [tuple(_tuplify(e) for e in item) if isinstance(item, list) else item
                for item in x]
    return x


def _desc(kind, shape, dtype, rdtype, rclass):
    shape = tuple(shape)
    if kind == "record":
        return f"record {rclass} {rdtype} shape {tuple(shape)}"
    if kind in ("int", "float", "bool"):
        return f"Python {kind}"
    return f"{kind} {dtype} shape {tuple(shape)}"


class Schema:
    """Structure of a sample plus its fields, in order."""

    def __init__(self, structure, fields, ntype=None, width=None):
        self.structure = structure       # "value" | "tuple" | "list" | "namedtuple" | "dict"
        self.fields = list(fields)
        self.width = len(self.fields) if width is None else width  # fields of a full sample
        self.ntype = ntype               # namedtuple class (not serialised)
        self.keys = [f.key for f in self.fields]
        self._pos = {f.key: i for i, f in enumerate(self.fields)}
        self._spec = None

    @classmethod
    def of(cls, sample, where="sample", keys=None, may_vary=None):
        """The schema of one sample; with `keys`, of only those fields (in that
        order: the others are neither checked nor stored).  `may_vary(key)`:
        True for a field that may turn out ragged (no-element shapes are then
        checked once the loading knows)."""
        structure, ntype, items = ext.structure_of(sample, where)
        width = len(items)
        if keys is not None:
            have = dict(items)
            items = [(k, have[k]) for k in _selected(keys, [k for k, _ in items])]
            if structure == "namedtuple":
                structure, ntype = "tuple", None
        fields = []
        for key, value in items:
            kind, shape, dtype, rdtype, rclass = classify(value, f"{where}[{key!r}]")
            f = Field(key, kind, shape, dtype, rdtype, rclass)
            if f.disp == 0 and not (may_vary is not None and kind in RAGGED_KINDS and
                                    may_vary(key)):
                raise ValueError(f"{where}[{key!r}]: a field with no elements (shape "
                                 f"{f.shape}) cannot be stored"
                                 + (" (a field whose size varies: DistDataset(ragged=True))"
                                    if kind in RAGGED_KINDS else ""))
            fields.append(f)
        return cls(structure, fields, ntype, width)

    def describe(self):
        return {"structure": self.structure, "width": self.width,
                "ntype": None if self.ntype is None else
                f"{self.ntype.__module__}.{self.ntype.__qualname__}",
                "fields": [f.describe() for f in self.fields]}

    @classmethod
    def from_description(cls, d, var_of=None):
        fields = [Field.from_description(fd, var_of(i) if var_of else None)
                  for i, fd in enumerate(d["fields"])]
        structure = d["structure"]
        if structure == "namedtuple":
            structure = "tuple"   # the class is not available in another job
        return cls(structure, fields, None, d.get("width"))

    def select(self, keys):
        """The schema restricted to `keys` (in that order)."""
        if keys is None:
            return self
        keys = _selected(keys, self.keys)
        structure = self.structure
        if structure == "namedtuple":
            structure = "tuple"
        return Schema(structure, [self.fields[self._pos[k]] for k in keys], None, self.width)

    def field(self, key):
        try:
            return self.fields[self._pos[key]]
        except (KeyError, TypeError):
            raise UnknownFieldError(f"field {key!r} not in the sample's fields "
                                    f"{self.keys!r}") from None

    # -- values ------------------------------------------------------------
    def _samples(self):
        """The extension's view of this schema (samples.cpp); rebuilt when
        the fields change (ragged.decide resets it)."""
        if self._spec is None:
            self._spec = ext.Samples(self.structure, self.width, self.keys, self.fields)
        return self._spec

    def values(self, sample, where="sample", check=True):
        """The field values of `sample` (checked against this schema), in order.

        Works on samples with more fields than this schema (fields=).  With
        check=False only the structure is checked (the caller checks each
        value: ragged loading)."""
        sp = self._samples()
        vals = sp.values(sample, where)
        if check:
            sp.check(vals, where)
        return vals

    def fill(self, source, encode, first, lo, j0, j1, arrays, bar):
        """Samples j0 .. j1-1 of this rank's share (source[lo + j], encoded;
        sample 0 is `first`) checked and copied into rows 0 .. j1-j0-1 of
        `arrays` (one (n, *row_shape) array of the storage dtype per field,
        or a view into packed rows); bar.update(256) every 256 samples."""
        self._samples().fill(source, encode, first, lo, j0, j1, arrays, bar)

    def fill_columns(self, source, encode, first, lo, n, cols, bar):
        """The same over samples 0 .. n-1 into ragged loading's Columns
        (ragged.Column, one per field)."""
        self._samples().fill_columns(source, encode, first, lo, n, cols, bar)

    def build(self, vals):
        """A sample of this structure from field values in order."""
        return self.build_many([[v] for v in vals])[0]

    def build_many(self, cols):
        """Samples from per-field columns of per-sample values (the
        extension's build_samples: no per-sample Python)."""
        st = self.structure
        return ext.build_samples(st, self.keys, self.ntype,
                                 _pyg_data() if st == "pyg" else None, cols)

    def build_batch(self, vals):
        """What default_collate returns for samples of this structure, from
        the collated field values: tuples and lists become lists."""
        st = self.structure
        if st == "value":
            return vals[0]
        if st in ("tuple", "list"):
            return list(vals)
        if st == "namedtuple":
            return self.ntype(*vals)
        if st == "pyg":
            from .ragged import pyg_batch
            return pyg_batch(self, vals)
        return dict(zip(self.keys, vals))

    @property
    def ragged(self):
        """The ragged fields."""
        return [f for f in self.fields if f.axis is not None]

    @property
    def has_records(self):
        return any(f.kind == "record" for f in self.fields)
