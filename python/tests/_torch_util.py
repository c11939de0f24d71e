"""Helpers of the pyddstore.torch tests (test_torch_*.py).

Every rank runs the same tests in the same order.  A check that could fail on
one rank only is made collective with `assert_all`, so a failure fails every
rank instead of leaving the others waiting in the next collective call.
"""
import atexit
import collections
import os
import shutil
import socket
import tempfile

import numpy as np
import pytest
import torch

import pyddstore

N_ODD = 37          # not a multiple of 2 or 4 (nor of 3)


def world():
    """mpi4py's COMM_WORLD (the tests run under tools/ddrun), or skip."""
    if not pyddstore.HAVE_MPI:
        pytest.skip("this build of pyddstore has no MPI (HAVE_MPI False)")
    from mpi4py import MPI
    return MPI.COMM_WORLD


def assert_all(comm, ok, msg=""):
    """Collective assert: fails on every rank if `ok` is false on any."""
    oks = comm.allgather((bool(ok), str(msg) if not ok else ""))
    bad = [(r, m) for r, (o, m) in enumerate(oks) if not o]
    assert not bad, "; ".join(f"rank {r}: {m}" for r, m in bad)


def require_method(m, comm=None):
    """Skip when this build lacks what method m needs (pyddstore.HAVE_MPI for
    method 0, HAVE_OFI for methods 1 and 2), from the build flags: a build
    that has it must create the store, so an error there fails the test."""
    if m == 0 and not pyddstore.HAVE_MPI:
        pytest.skip("method 0 needs MPI (HAVE_MPI False)")
    if m in (1, 2) and not pyddstore.HAVE_OFI:
        pytest.skip(f"method {m} needs libfabric (HAVE_OFI False)")


def on_rank0(comm, fn):
    """fn() on rank 0 (writing a shared file); its failure fails every rank,
    never leaving the others in a barrier that rank 0 does not reach."""
    err = None
    if comm.Get_rank() == 0:
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - agreed below
            err = e
    assert_all(comm, err is None, f"on rank 0: {err!r}")


_TMP = {}


def shared_tmpdir(comm, tag):
    """A directory every rank agrees on (one node: rank 0 creates it, and
    removes it when the process exits)."""
    key = (tag, comm.Get_size())
    if key not in _TMP:
        d = tempfile.mkdtemp(prefix=f"ddst-{tag}-") if comm.Get_rank() == 0 else None
        if d is not None:
            atexit.register(shutil.rmtree, d, True)
        _TMP[key] = comm.bcast(d, root=0)
    return _TMP[key]


_PG = {}


def torch_pg(comm):
    """torch.distributed (gloo) over the same ranks, initialised once."""
    import torch.distributed as dist
    if dist.is_initialized():
        return dist.group.WORLD
    if comm.Get_rank() == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    else:
        port = None
    port = comm.bcast(port, root=0)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=comm.Get_rank(), world_size=comm.Get_size())
    return dist.group.WORLD


# ---------------------------------------------------------------- sources ---
Point = collections.namedtuple("Point", ["pos", "tag"])
REC = np.dtype([("id", "<i4"), ("w", "<f8"), ("flag", "?"), ("v", "<f4", (2,))])


def rec_of(i, shape=()):
    a = np.zeros(shape, dtype=REC)
    flat = a.reshape(-1)
    for k in range(flat.size):
        flat[k] = (i * 10 + k, i + k / 8, (i + k) % 2 == 0, (i, -k))
    return a


def make_sample(kind, i):
    """Sample i of a source of the given kind (deterministic in i)."""
    g = torch.Generator().manual_seed(1000 + i)
    if kind == "tensor":
        return torch.rand((3, 4), generator=g)
    if kind == "tensor0d":
        return torch.tensor(float(i) * 1.5, dtype=torch.float64)
    if kind == "ndarray":
        return np.arange(5, dtype=np.int32) * i - 7
    if kind == "int":
        return i * 1_000_000_007 - 3
    if kind == "float":
        return i / 7.0
    if kind == "bool":
        return i % 3 == 0
    if kind == "npscalar":
        return np.float32(i) / np.float32(3)
    if kind == "tuple":
        return (torch.randint(0, 255, (2, 2), generator=g, dtype=torch.uint8), i % 10)
    if kind == "list":
        return [np.linspace(0, i, 3), np.int32(-i), bool(i % 2)]
    if kind == "dict":
        return {"x": torch.arange(2, dtype=torch.int64) + i, "y": i * 0.25,
                3: np.arange(4) % (i + 2) == 0}
    if kind == "namedtuple":
        return Point(torch.full((2,), float(i)), np.int64(i * 3))
    if kind == "half":
        # 2-byte floats, bit patterns a conversion would change (NaN payloads,
        # -0.0, infinities, subnormals): tensors, a numpy array, a numpy scalar
        from _util import half_bits
        k = np.arange(4) * 37 + i * 613
        bits = torch.from_numpy(half_bits(k, special=(k + i) % 2 == 0).astype(np.int16))
        return {"h": bits[:3].clone().view(torch.float16),
                "b": bits.clone().view(torch.bfloat16).reshape(2, 2),
                "n": bits[1:].numpy().copy().view(np.float16),
                # a scalar: no NaN (default_collate converts numpy scalars
                # through Python floats, which keeps -0.0 and infinities only)
                "s": np.array([0x8000, 0x7C00, 0x0001, 0xFC00, 0x3C00][i % 5],
                              dtype=np.uint16).view(np.float16)[()]}
    if kind == "void":
        return rec_of(i)[()]
    if kind == "structured":
        return rec_of(i, (3,))
    if kind == "recarray":
        return rec_of(i, (2,)).view(np.recarray)
    if kind == "recdict":
        return {"r": rec_of(i, (2,)), "t": torch.full((3,), float(i), dtype=torch.float32)}
    raise ValueError(kind)


KINDS = ["tensor", "tensor0d", "ndarray", "int", "float", "bool", "npscalar", "tuple",
         "list", "dict", "namedtuple", "half"]
RECORD_KINDS = ["void", "structured", "recarray", "recdict"]


class Source(torch.utils.data.Dataset):
    """A plain map-style dataset of `kind` samples."""

    def __init__(self, kind, n=N_ODD, fail_at=None, fn=None):
        self.kind, self.n, self.fail_at, self.fn = kind, n, fail_at, fn
        self.calls = 0

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.calls += 1
        if self.fail_at is not None and i == self.fail_at:
            raise ZeroDivisionError(f"source refuses sample {i}")
        if self.fn is not None:
            return self.fn(i)
        return make_sample(self.kind, i)


# ------------------------------------------------------------- comparison ---
def same(a, b, path="sample"):
    """'' if a and b are equal in value, type, dtype and shape; else why not."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return f"{path}: {type(a).__name__} vs {type(b).__name__}"
        if a.dtype != b.dtype or a.shape != b.shape:
            return f"{path}: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}"
        if a.is_floating_point():
            # bit-exact: NaN payloads and -0.0 count (torch.equal: NaN != NaN)
            ia = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
            if not torch.equal(a.cpu().contiguous().view(ia), b.cpu().contiguous().view(ia)):
                return f"{path}: values differ (bitwise)"
        elif not torch.equal(a.cpu(), b.cpu()):
            return f"{path}: values differ"
        return ""
    if isinstance(a, (np.ndarray, np.generic)) or isinstance(b, (np.ndarray, np.generic)):
        if type(a) is not type(b):
            return f"{path}: {type(a).__name__} vs {type(b).__name__}"
        if a.dtype != b.dtype or np.shape(a) != np.shape(b):
            return f"{path}: {a.dtype}{np.shape(a)} vs {b.dtype}{np.shape(b)}"
        if np.asarray(a).tobytes() != np.asarray(b).tobytes():
            return f"{path}: values differ"
        return ""
    if isinstance(a, dict):
        if type(a) is not type(b) or list(a.keys()) != list(b.keys()):
            return f"{path}: keys {list(a)} vs {list(b) if isinstance(b, dict) else b}"
        for k in a:
            w = same(a[k], b[k], f"{path}[{k!r}]")
            if w:
                return w
        return ""
    if isinstance(a, (tuple, list)):
        if type(a) is not type(b) or len(a) != len(b):
            return f"{path}: {type(a).__name__}/{len(a)} vs {type(b).__name__}"
        for k, (x, y) in enumerate(zip(a, b)):
            w = same(x, y, f"{path}[{k}]")
            if w:
                return w
        return ""
    if type(a) is not type(b) or a != b:
        return f"{path}: {a!r} ({type(a).__name__}) vs {b!r} ({type(b).__name__})"
    return ""


def env_set(monkeypatch, **kw):
    for k, v in kw.items():
        if v is None:
            monkeypatch.delenv(k, raising=False)
        else:
            monkeypatch.setenv(k, str(v))


def fresh_name(tag):
    fresh_name.n += 1
    return f"{tag}{fresh_name.n}"


fresh_name.n = 0

_ = os
