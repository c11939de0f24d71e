"""ADIOS2 files in HydraGNN's layout (its AdiosWriter / AdiosDataset).

For each key of label L: variable ``L/key`` holds every sample's array
concatenated along dimension ``L/key/variable_dim`` (an attribute); int64
variables ``L/key/variable_count`` and ``L/key/variable_offset`` hold, per
sample, its size and start along that dimension; attributes ``L/ndata``
(samples) and ``L/keys`` (the keys).  Types double, float, int32, int64 and
uint8; a uint8 key holds UTF-8 text (HydraGNN's SMILES), read back as str.
Works with the serial ``adios2`` wheel: every rank opens the file and sets
its own selections."""

import glob
import os

import numpy as np

from ._source import Key, Source, check_prefix, need

_TYPES = {"double": "float64", "float": "float32", "int32_t": "int32", "int64_t": "int64",
          "uint8_t": "uint8"}


def _adios():
    return need("adios2", "adios2", "ADIOS2 files (DistDataset.from_adios, write_adios)")


def _bad(path, why):
    return ValueError(f"{path}: {why}")


class AdiosSource(Source):
    """An ADIOS2 file of HydraGNN's layout, opened on this rank."""

    def __init__(self, path, label, keys=None):
        ad = _adios()
        b = ad.bindings
        self.path, self.label = str(path), label
        self._ad = b.ADIOS()
        self._io = self._ad.DeclareIO(f"ddstore-read-{id(self)}")
        try:
            self._eng = self._io.Open(self.path, b.Mode.ReadRandomAccess)
        except Exception as e:  # noqa: BLE001 - adios2 raises bare exceptions
            raise _bad(self.path, f"cannot be opened as an ADIOS2 file ({e})") from None
        self._b = b
        try:
            self._check_size()
            self._describe(keys)
        except BaseException:
            self.close()
            raise

    def _check_size(self):
        """A data file shorter than its variables (a copy cut short) makes
        adios2 wait forever in the read: refuse it first.  (Uncompressed
        BP4/BP5 directories; a variable with an operator skips the check.)"""
        if not os.path.isdir(self.path):
            return
        have = sum(os.path.getsize(f) for f in glob.glob(os.path.join(self.path, "data.*")))
        need = 0
        for name in self._io.AvailableVariables():
            v = self._io.InquireVariable(name)
            if not v or v.Operations():
                return
            need += int(np.prod([int(d) for d in v.Shape()], dtype=np.int64)) * v.Sizeof()
        if have < need:
            raise _bad(self.path, f"is truncated: its data files hold {have} bytes, its "
                       f"variables {need}")

    def _attr(self, name, what):
        a = self._io.InquireAttribute(name)
        if not a:
            raise _bad(self.path, f"no attribute '{name}' ({what}): not a file of label "
                       f"'{self.label}' in HydraGNN's layout")
        return a

    def _var(self, name):
        v = self._io.InquireVariable(name)
        if not v:
            raise _bad(self.path, f"no variable '{name}'")
        return v

    def _describe(self, want):
        L = self.label
        nd = self._attr(f"{L}/ndata", "number of samples").Data()
        self.total = int(np.asarray(nd).reshape(-1)[0])
        names = list(self._attr(f"{L}/keys", "the keys").DataString())
        if want is not None:
            want = [want] if isinstance(want, str) else list(want)
            missing = [k for k in want if k not in names]
            if missing:
                raise KeyError(f"{self.path}: label '{L}' has no key(s) {missing} "
                               f"(its keys: {names})")
            names = want
        if self.total < 0:
            raise _bad(self.path, f"'{L}/ndata' is {self.total}")
        self.keys = []
        for k in names:
            v = self._var(f"{L}/{k}")
            t = v.Type()
            if t not in _TYPES:
                raise _bad(self.path, f"'{L}/{k}' has type {t}: supported are "
                           f"{', '.join(_TYPES)}")
            shape = [int(d) for d in v.Shape()]
            dim = int(np.asarray(self._attr(f"{L}/{k}/variable_dim", "the dimension "
                                            "samples are concatenated along").Data()
                                 ).reshape(-1)[0])
            if not shape or not 0 <= dim < len(shape):
                raise _bad(self.path, f"'{L}/{k}/variable_dim' is {dim}, but '{L}/{k}' "
                           f"has shape {shape}")
            for suffix in ("variable_count", "variable_offset"):
                c = self._var(f"{L}/{k}/{suffix}")
                if c.Type() != "int64_t" or [int(d) for d in c.Shape()] != [self.total]:
                    raise _bad(self.path, f"'{L}/{k}/{suffix}' must be int64 of shape "
                               f"[{self.total}] (one entry per sample), is {c.Type()} "
                               f"{[int(d) for d in c.Shape()]}")
            dtype = _TYPES[t]
            kind = "str" if dtype == "uint8" else "tensor"
            if kind == "str" and len(shape) != 1:
                raise _bad(self.path, f"'{L}/{k}' is uint8 (text) of shape {shape}: "
                           "text keys are 1-D")
            self.keys.append(Key(k, dtype, kind, shape, dim, "count"))

    def _get(self, name, start, count, out):
        v = self._var(name)
        v.SetSelection([list(start), list(count)])
        self._eng.Get(v, out, self._b.Mode.Sync)

    def counts(self, key, lo, hi):
        out = np.empty(hi - lo, dtype=np.int64)
        if hi > lo:
            self._get(f"{self.label}/{key.key}/variable_count", [lo], [hi - lo], out)
        return out

    def check_starts(self, key, lo, hi, start, counts):
        if hi <= lo:
            return
        name = f"{self.label}/{key.key}/variable_offset"
        got = np.empty(hi - lo, dtype=np.int64)
        self._get(name, [lo], [hi - lo], got)
        check_prefix(self.path, name, lo, got, start, counts)

    def read(self, key, start, n, out):
        s = [0] * len(key.shape)
        c = list(key.shape)
        s[key.dim], c[key.dim] = start, n
        self._get(f"{self.label}/{key.key}", s, c, out)

    def close(self):
        eng, self._eng = getattr(self, "_eng", None), None
        if eng is not None:
            eng.Close()


# ------------------------------------------------------------------ writing --
def _column_of(values, key):
    """(array, dim, counts) of one key's per-sample values (HydraGNN's rule:
    the one dimension whose size varies, else 0)."""
    arrs = []
    for v in values:
        if isinstance(v, str):
            v = np.frombuffer(v.encode("utf-8"), dtype=np.uint8)
        elif hasattr(v, "detach"):
            v = v.detach().cpu().numpy()
        a = np.asarray(v)
        if a.ndim == 0:
            a = a.reshape(1)
        arrs.append(a)
    nd = {a.ndim for a in arrs}
    if len(nd) != 1:
        raise ValueError(f"key {key!r}: samples with different numbers of dims {sorted(nd)}")
    shapes = np.array([a.shape for a in arrs])
    vary = [d for d in range(shapes.shape[1]) if shapes[:, d].min() != shapes[:, d].max()]
    if len(vary) > 1:
        raise ValueError(f"key {key!r}: the samples' shapes vary along dims {vary}; one "
                         "varying dimension at most")
    dim = vary[0] if vary else 0
    return np.concatenate(arrs, axis=dim), dim, shapes[:, dim].astype(np.int64)


def write_adios_columns(path, label, columns, ndata, attrs=None):
    """Write an ADIOS2 file in HydraGNN's layout from whole columns.

    columns: {key: (values, counts, dim)}: `values` every sample's array
    concatenated along `dim`, `counts` (int64, ndata entries) each sample's
    size along it.  str keys: pass uint8 values.  attrs: extra attributes
    {name: value}.  Serial (one process writes the file)."""
    ad = _adios()
    b = ad.bindings
    adios = b.ADIOS()
    io = adios.DeclareIO(f"ddstore-write-{id(columns)}")
    eng = io.Open(str(path), b.Mode.Write)
    try:
        io.DefineAttribute(f"{label}/ndata", np.array(int(ndata)))
        io.DefineAttribute(f"{label}/keys", [str(k) for k in columns])
        for k, (values, counts, dim) in columns.items():
            values = np.ascontiguousarray(values)
            counts = np.ascontiguousarray(counts, dtype=np.int64)
            if counts.shape != (ndata,) or int(counts.sum()) != values.shape[dim]:
                raise ValueError(f"key {k!r}: counts must have {ndata} entries summing to "
                                 f"the values' size {values.shape[dim]} along dim {dim}")
            offsets = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
            shape = list(values.shape)
            var = io.DefineVariable(f"{label}/{k}", values, shape, [0] * len(shape), shape,
                                    b.ConstantDims)
            eng.Put(var, values, b.Mode.Sync)
            io.DefineAttribute(f"{label}/{k}/variable_dim", np.array(int(dim)))
            for suffix, arr in (("variable_count", counts), ("variable_offset", offsets)):
                v = io.DefineVariable(f"{label}/{k}/{suffix}", arr, [ndata], [0], [ndata],
                                      b.ConstantDims)
                eng.Put(v, arr, b.Mode.Sync)
        for name, value in (attrs or {}).items():
            io.DefineAttribute(name, value)
    finally:
        eng.Close()


def write_adios(path, label, samples, keys=None, attrs=None):
    """Write samples (dicts {key: array, tensor, number or str}, the same
    keys in each) as an ADIOS2 file in HydraGNN's layout under `label`.  Each
    key's samples must have the same number of dims and vary in at most one
    dimension (str keys: UTF-8 text).  Serial; for a dataset converted once
    and for tests (a big one: write_adios_columns)."""
    samples = list(samples)
    if not samples:
        raise ValueError("write_adios: no samples")
    keys = list(samples[0].keys()) if keys is None else list(keys)
    cols = {}
    for k in keys:
        values, dim, counts = _column_of([s[k] for s in samples], k)
        cols[k] = (values, counts, dim)
    write_adios_columns(path, label, cols, len(samples), attrs)
