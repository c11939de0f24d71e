"""Variable-size samples in pyddstore.torch: ragged fields and their batches.

A tensor/ndarray field whose shape varies along exactly one axis (the same
axis for every sample: node features ``[n, F]`` along 0, edges ``[2, e]``
along 1) is stored as one ragged variable of the store: the varying axis
moved to the front, one *element row* per index along it (``add_ragged``).
Batches of such a field come

- packed: :class:`Packed` ``(values, lengths, offsets, batch)``: the samples
  concatenated along their varying axis, ``offsets`` the B+1 prefix sums of
  ``lengths``, ``batch`` the sample (position in the batch) of every element
  (the layout graph libraries use);
- padded: :class:`Padded` ``(values, lengths, mask)``: ``values`` is
  ``(B, *shape)`` with the varying axis padded with zeros to the batch
  maximum, ``mask`` ``(B, max)`` True where an element is real.

This module holds the ragged= options and the batch builders; the loading
(Column, ragged_decide, samples.cpp) and the reads (Reads.read: one packed
read per ragged field, dataset.cpp) are the torch extension's.
"""

import collections.abc
import operator
from typing import NamedTuple

import torch

from ._ext import ext
from .schema import RAGGED_KINDS, Field

__all__ = ["Packed", "Padded", "ragged_mode", "RAGGED_BATCH"]

RAGGED_BATCH = ("packed", "padded")


class Packed(NamedTuple):
    """A packed batch of one ragged field.

    ``values``: the samples concatenated along the field's varying axis (a
    field of shape ``[n, F]`` gives ``[sum n, F]``; ``[2, e]`` gives
    ``[2, sum e]``); ``lengths`` (B,) int64: each sample's size along it;
    ``offsets`` (B+1,) int64: prefix sums of ``lengths`` (sample ``b`` is
    ``values`` [offsets[b]:offsets[b+1]] along the axis); ``batch``
    (sum lengths,) int64: the batch position of every element."""
    values: torch.Tensor
    lengths: torch.Tensor
    offsets: torch.Tensor
    batch: torch.Tensor

    def to(self, *args, **kwargs):
        return Packed(*(t.to(*args, **kwargs) for t in self))

    def pin_memory(self):
        return Packed(*(t.pin_memory() for t in self))

    def unpack(self, axis=0):
        """The per-sample tensors (views), split along `axis` (the field's
        varying axis; 0 for fields that vary along their first axis)."""
        return list(torch.split(self.values, self.lengths.tolist(), dim=axis))


class Padded(NamedTuple):
    """A padded batch of one ragged field.

    ``values``: ``(B, *shape)`` with the varying axis padded with zeros to
    ``max(lengths)``; ``lengths`` (B,) int64; ``mask`` (B, max) bool, True
    where an element is real."""
    values: torch.Tensor
    lengths: torch.Tensor
    mask: torch.Tensor

    def to(self, *args, **kwargs):
        return Padded(*(t.to(*args, **kwargs) for t in self))

    def pin_memory(self):
        return Padded(*(t.pin_memory() for t in self))


# ---------------------------------------------------------------- options --
def ragged_mode(ragged, keys=None):
    """mode_of(key) for DistDataset(ragged=...): None (the field is fixed),
    "auto" (ragged if its size varies, along the axis it varies) or an axis
    (declared ragged along that axis).

    ragged: False/None (every field fixed, as before), True (auto for every
    tensor/ndarray field), a list of keys (auto for those), or a dict
    {key: axis or None} (declared; None = auto axis)."""
    if ragged is None or ragged is False:
        return None
    if ragged is True:
        return lambda key: "auto"
    if isinstance(ragged, collections.abc.Mapping):
        table = {}
        for k, a in ragged.items():
            if a is not None:
                if isinstance(a, bool):
                    raise TypeError(f"ragged={{{k!r}: {a!r}}}: the axis must be an int or None")
                a = operator.index(a)
                if a < 0:
                    raise ValueError(f"ragged={{{k!r}: {a}}}: the axis must be >= 0")
            table[k] = "auto" if a is None else a
    elif isinstance(ragged, (list, tuple, set, frozenset)):
        table = {k: "auto" for k in ragged}
    else:
        raise TypeError(f"ragged must be a bool, a list of field keys or a dict "
                        f"{{key: axis}}, got {type(ragged).__name__}")
    unknown = [] if keys is None else [k for k in table if k not in keys]
    if unknown:
        raise ValueError(f"ragged: {'field' if len(unknown) == 1 else 'fields'} "
                         f"{unknown if len(unknown) > 1 else unknown[0]!r} not in the "
                         f"sample's fields {list(keys)!r}")
    return table.get


def comparable(desc, mode_of):
    """A schema description without the shapes of fields that may be ragged
    (their number of dims kept): what the ranks compare before loading."""
    if mode_of is None:
        return desc
    out = dict(desc)
    fields = []
    for fd in desc["fields"]:
        if fd["kind"] in RAGGED_KINDS and mode_of(fd["key"]) is not None:
            fd = dict(fd)
            fd["shape"] = f"{len(fd['shape'])} dims"
        fields.append(fd)
    out["fields"] = fields
    return out


# ---------------------------------------------------------------- loading --
# Column(field, n, mode, where): one field's local samples while loading
# (fixed rows in one array until a sample's shape differs, mode "auto", or
# from the start, a declared axis; then per-sample host tensors); put(j,
# value, where), report() (what the ranks exchange: [first shape, varying
# axes]), arr, ragged_values(axis, disp), drop().
Column = ext.Column


def decide(schema, columns, reports, mode_of, name):
    """Every rank: from every rank's reports (allgathered, the same list on
    every rank, so every rank raises the same error) the fields' final form:
    replaces schema.fields with ragged Fields where they vary.  Returns the
    keys of the ragged fields."""
    schema.fields[:] = ext.ragged_decide(schema.fields, reports, mode_of, name, Field)
    schema._spec = None
    return [f.key for f in schema.fields if f.axis is not None]


def ragged_values(f, col, n):
    """(values (total, disp) host array of the storage dtype, lengths int64)
    of one ragged field's local samples."""
    return col.ragged_values(f.axis, f.disp)


# ---------------------------------------------------------------- reading --
def _field_layout(f, values):
    """(total, *row_shape) storage -> the field's layout (varying axis where
    the samples have it)."""
    if f.axis == 0:
        return values
    return values.movedim(0, f.axis).contiguous()


def packed(f, values, lengths, offsets, batch):
    return Packed(_field_layout(f, values), lengths, offsets, batch)


def padded(f, values, lengths, offsets, batch):
    out, mask = ext.padded_values(values, lengths, offsets, batch, f.axis)
    return Padded(out, lengths, mask)


def batch_of(kind):
    return packed if kind == "packed" else padded


def sample_value(f, values):
    """One sample's value, its original shape and kind, from its element rows
    (len, *row_shape)."""
    t = values
    if f.axis != 0:
        t = t.movedim(0, f.axis).contiguous()
    if f.kind == "ndarray":
        return t.numpy() if t.device.type == "cpu" else t.cpu().numpy()
    return t


def split_values(f, values, lengths):
    """Per-sample values of a packed read."""
    parts = torch.split(values, lengths.tolist(), dim=0)
    return [sample_value(f, p) for p in parts]


class RaggedSamples(list):
    """The samples of DistDataset.__getitems__ (a list), carrying the packed
    reads they were made from, so that DistDataset.collate_fn builds the
    batch without touching the samples."""
    __slots__ = ("raw",)


def pack_samples(schema, samples, kind):
    """collate_fn over samples of the schema's structure (no packed reads at
    hand, e.g. after decode= or from a Subset): ragged fields packed or
    padded, the others by default_collate."""
    from torch.utils.data import default_collate
    cols = [[] for _ in schema.fields]
    st = schema.structure
    for s in samples:
        if st == "value":
            vals = [s]
        elif st == "dict":
            vals = [s[k] for k in schema.keys]
        else:
            vals = [s[k] for k in schema.keys]
        for c, v in zip(cols, vals):
            c.append(v)
    out = []
    for f, c in zip(schema.fields, cols):
        if f.axis is None:
            out.append(default_collate(c))
            continue
        ts = [torch.as_tensor(v) for v in c]
        if f.axis != 0:
            ts = [t.movedim(f.axis, 0) for t in ts]
        lengths = torch.tensor([t.shape[0] for t in ts], dtype=torch.int64)
        values = torch.cat(ts, 0) if ts else torch.empty((0,) + f.row_shape,
                                                         dtype=f.torch_dtype)
        offsets = torch.zeros(len(ts) + 1, dtype=torch.int64)
        torch.cumsum(lengths, 0, out=offsets[1:])
        batch = torch.repeat_interleave(torch.arange(len(ts), dtype=torch.int64), lengths)
        out.append(batch_of(kind)(f, values, lengths, offsets, batch))
    return schema.build_batch(out)


# ---------------------------------------------------------- torch_geometric --
# torch_geometric's node-level keys (Data.num_nodes looks at these) and its
# rule for concatenation: keys containing "index" (and "face") along their
# last dim, incremented by the number of nodes; everything else along dim 0.
_PYG_NODE_KEYS = ("x", "pos", "z", "feat", "node_type")


def _pyg_index_key(key):
    return isinstance(key, str) and ("index" in key or key == "face")


def pyg_mode(schema):
    """mode_of for torch_geometric Data samples: index fields ragged along
    their last dim, node-level fields along 0, the others ragged where they
    vary (along 0, as torch_geometric concatenates)."""
    table = {}
    for f in schema.fields:
        if f.kind not in RAGGED_KINDS or not f.shape:
            continue
        if _pyg_index_key(f.key):
            table[f.key] = len(f.shape) - 1
        elif f.key in _PYG_NODE_KEYS:
            table[f.key] = 0
        else:
            table[f.key] = "auto"
    return table.get


def pyg_batch(schema, vals):
    """A torch_geometric Batch from a batch's collated field values (Packed
    for ragged fields, stacked tensors for fixed ones): what
    Batch.from_data_list gives for the same samples (index fields
    incremented by the nodes of the samples before, batch and ptr from the
    number of nodes)."""
    from torch_geometric.data import Batch, Data
    fields = schema.fields
    by_key = dict(zip(schema.keys, vals))
    b = None
    num_nodes = None
    for f, v in zip(fields, vals):
        if isinstance(v, Packed):
            b = v.lengths.numel()
            if f.key in _PYG_NODE_KEYS and f.axis == 0 and num_nodes is None:
                num_nodes = v.lengths
    if b is None:
        b = next(iter(vals)).shape[0]
    if num_nodes is None and "num_nodes" in by_key:
        num_nodes = torch.as_tensor(by_key["num_nodes"], dtype=torch.int64)
    if num_nodes is None:
        for f, v in zip(fields, vals):
            if f.key in _PYG_NODE_KEYS and not isinstance(v, Packed) and f.shape:
                num_nodes = torch.full((b,), f.shape[0], dtype=torch.int64)
                break
    if num_nodes is None:
        raise ValueError("torch_geometric batch: no node-level field (x, pos, z, ...) "
                         f"among {schema.keys!r} to count the nodes of each sample")
    ptr = torch.zeros(b + 1, dtype=torch.int64)
    torch.cumsum(num_nodes, 0, out=ptr[1:])
    out = Batch(_base_cls=Data)
    slices, incs = {}, {}
    for f, v in zip(fields, vals):
        key = f.key
        if isinstance(v, Packed):
            value = v.values
            slices[key] = v.offsets
            if _pyg_index_key(key):
                inc = ptr[:-1]
                value = value + inc.to(value.device)[v.batch.to(value.device)]
                incs[key] = inc
            else:
                incs[key] = torch.zeros(b, dtype=torch.int64)
        elif isinstance(v, torch.Tensor):
            if v.dim() <= 1:
                value = v
                slices[key] = torch.arange(b + 1, dtype=torch.int64)
            else:
                value = v.reshape((-1,) + tuple(v.shape[2:]))
                slices[key] = torch.arange(b + 1, dtype=torch.int64) * v.shape[1]
            incs[key] = torch.zeros(b, dtype=torch.int64)
        else:
            value = v
        out[key] = value
    out.batch = torch.repeat_interleave(torch.arange(b, dtype=torch.int64), num_nodes)
    out.ptr = ptr
    out._num_graphs = b
    out._slice_dict = slices
    out._inc_dict = incs
    return out
