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

from typing import NamedTuple

import torch

from ._ext import ext
from .schema import Field

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
    {key: axis or None} (declared; None = auto axis).  The table and its
    checks: the extension's ragged_table."""
    table = ext.ragged_table(ragged, keys)
    if table is None:
        return None
    return (lambda key: "auto") if table == "auto" else table.get


# A schema description without the shapes of fields that may be ragged
# (their number of dims kept): what the ranks compare before loading.
comparable = ext.comparable


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
    keys = schema.keys
    cols = [list(samples)] if schema.structure == "value" else \
        [[s[k] for s in samples] for k in keys]
    out = []
    for f, c in zip(schema.fields, cols):
        if f.axis is None or f.kind == "str":     # str: a list, as default_collate
            out.append(default_collate(c))
            continue
        ts = [torch.as_tensor(v).movedim(f.axis, 0) for v in c]
        out.append(batch_of(kind)(f, *ext.pack_tensors(ts, f.row_shape, f.dtype)))
    return schema.build_batch(out)


# ---------------------------------------------------------- torch_geometric --
def pyg_mode(schema):
    """mode_of for torch_geometric Data samples: index fields ragged along
    their last dim, node-level fields along 0, the others ragged where they
    vary (along 0, as torch_geometric concatenates): the extension's
    pyg_table."""
    return ext.pyg_table(schema.fields).get


def pyg_batch(schema, vals):
    """A torch_geometric Batch from a batch's collated field values (Packed
    for ragged fields, stacked tensors for fixed ones): what
    Batch.from_data_list gives for the same samples (index fields
    incremented by the nodes of the samples before, batch and ptr from the
    number of nodes: the extension's pyg_parts)."""
    from torch_geometric.data import Batch, Data
    b, values, slices, incs, batch, ptr = ext.pyg_parts(schema.fields, vals, Packed)
    out = Batch(_base_cls=Data)
    for key, value in zip(schema.keys, values):
        out[key] = value
    out.batch = batch
    out.ptr = ptr
    out._num_graphs = b
    out._slice_dict = slices
    out._inc_dict = incs
    return out
