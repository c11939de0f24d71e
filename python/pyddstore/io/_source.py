"""What a file reader gives the ingest (pyddstore.torch.ingest): keys and
one read per key of a rank's range of samples."""

import importlib

import numpy as np

# the stored dtypes a file may hold (pyddstore.torch's schema.SUPPORTED less
# bfloat16, which no file format here has)
DTYPES = ("bool", "uint8", "int32", "int64", "float16", "float32", "float64")


def need(module, extra, what):
    """import `module`, or ImportError naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(
            f"{what} needs the Python package '{module.split('.')[0]}', which is not "
            f"installed: pip install \"pyddstore[{extra}]\" (or ./ddstore setup) "
            f"({e})") from None


def check_prefix(path, what, lo, got, start, counts):
    """A file's per-sample starts `got` (samples lo, lo+1, ...) against
    `start` + the prefix sums of `counts`: ValueError naming `what` (the
    starts' variable) and the first sample that disagrees."""
    want = start + np.concatenate(([0], np.cumsum(counts[:-1])))
    bad = np.flatnonzero(got != want)
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{path}: '{what}'[{lo + i}] is {int(got[i])}, but the counts "
                         f"before it sum to {int(want[i])}")


class Key:
    """One key (field) of a file's samples.

    key: its name; dtype: a DTYPES name; kind: "tensor" or "str" (uint8 bytes
    that hold UTF-8 text, read back as str); shape: the global array's shape
    in the file, samples concatenated along `dim`; per_sample: "count" (each
    sample has count[i] entries along `dim`, the other dims as in `shape`)
    or "row" (one entry along `dim` per sample, which the sample's value does
    not have: an [N, 3] dataset gives [3] per sample, an [N] one 0-d)."""

    __slots__ = ("key", "dtype", "kind", "shape", "dim", "per_sample")

    def __init__(self, key, dtype, kind, shape, dim, per_sample):
        self.key, self.dtype, self.kind = key, dtype, kind
        self.shape, self.dim, self.per_sample = tuple(int(d) for d in shape), int(dim), per_sample

    def describe(self):
        return [self.key, self.dtype, self.kind, list(self.shape), self.dim, self.per_sample]

    @property
    def inner(self):
        """The shape of one entry along `dim` (the other dims)."""
        return self.shape[:self.dim] + self.shape[self.dim + 1:]

    def __repr__(self):
        return f"Key({self.key!r}, {self.dtype}, shape {self.shape} along {self.dim})"


class Source:
    """A file opened on one rank.  Subclasses set `path`, `total` (samples)
    and `keys` (a list of Key) and implement counts() and read()."""

    path = ""
    total = 0
    keys = ()
    chunked = True   # read() may take any sub-range of a rank's selection
                     # (else: exactly the rank's whole selection, once)

    def describe(self):
        """What every rank must see alike (a file that differs is an error)."""
        return [self.total, [k.describe() for k in self.keys]]

    def split(self, nranks):
        """Each rank's [lo, hi) of the samples: balanced (subclasses may
        align them to the file's blocks)."""
        base, extra = divmod(self.total, nranks)
        out, lo = [], 0
        for r in range(nranks):
            hi = lo + base + (1 if r < extra else 0)
            out.append((lo, hi))
            lo = hi
        return out

    def counts(self, key, lo, hi):
        """Samples lo..hi-1's entries along key.dim (int64 array); "row" keys:
        ones."""
        return np.ones(hi - lo, dtype=np.int64)

    def check_starts(self, key, lo, hi, start, counts):
        """The file's own record of where samples lo..hi-1 start along
        key.dim, if it has one, checked against `start` + the prefix sums of
        `counts` (ValueError naming the key)."""

    def read(self, key, start, n, out):
        """Entries [start, start+n) along key.dim, every other dim whole,
        into `out` (a C-contiguous array of that shape and key.dtype; n > 0).
        `start` counts entries from the first sample's (the ingest computes
        it from the ranks' sizes); without `chunked`, [start, start+n) is
        exactly the entries of the samples of the last counts() call for
        this key."""
        raise NotImplementedError

    def close(self):
        pass
