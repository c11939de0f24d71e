"""One copy of the C libraries per process (issue 22): pyddstore._core and
the torch extension both link libddstore.so (DT_NEEDED, RUNPATH $ORIGIN) and
share its state; there is no capsule between the two modules.

Run: tools/ddrun -n 2 -- .venv/bin/python -m pytest -q python/tests/test_torch_shared_lib.py
"""
import os
import struct

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import pyddstore  # noqa: E402
from pyddstore import _core  # noqa: E402
from _torch_util import assert_all, world  # noqa: E402
from pyddstore.torch._ext import ext  # noqa: E402

DT_NEEDED, DT_RPATH, DT_RUNPATH = 1, 15, 29


def _dynamic(path):
    """(DT_NEEDED names, RPATH/RUNPATH entries) of an ELF64 little-endian
    shared object, from its section headers (.dynamic and its string table)."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, path
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    dyn = [s for s in secs if s[1] == 6]               # SHT_DYNAMIC
    assert len(dyn) == 1, path
    _, _, _, _, off, size, link, _, _, entsize = dyn[0]
    stroff = secs[link][4]

    def string(i):
        return data[stroff + i:data.index(b"\0", stroff + i)].decode()

    needed, paths = [], []
    for k in range(size // entsize):
        tag, val = struct.unpack_from("<qQ", data, off + k * entsize)
        if tag == DT_NEEDED:
            needed.append(string(val))
        elif tag in (DT_RPATH, DT_RUNPATH):
            paths += string(val).split(":")
    return needed, paths


def _mapped(name):
    with open("/proc/self/maps") as f:
        return {line.split()[-1] for line in f
                if len(line.split()) >= 6 and os.path.basename(line.split()[-1]) == name}


def test_both_modules_link_one_libddstore():
    """Fails with the capsule design: the torch extension linked no C
    library, and _core had them statically (no libddstore.so at all)."""
    lib = os.path.join(os.path.dirname(_core.__file__), "libddstore.so")
    assert os.path.isfile(lib), "libddstore.so is not installed next to the modules"
    for mod in (_core, ext):
        needed, paths = _dynamic(mod.__file__)
        assert "libddstore.so" in needed, (mod.__file__, needed)
        assert "$ORIGIN" in paths, (mod.__file__, paths)
    maps = _mapped("libddstore.so")
    assert len(maps) == 1, f"libddstore.so mapped {len(maps)} times: {sorted(maps)}"
    assert os.path.realpath(maps.pop()) == os.path.realpath(lib)
    assert not hasattr(_core, "_C_API")


def test_store_of_core_read_by_torch():
    """A store made by PyDDStore (_core) is the object the torch extension
    reads (through its handle); the error detail recorded by one module's
    call is the other's (one thread-local state, one logger)."""
    comm = world()
    s = pyddstore.PyDDStore(comm, method=0)
    r, n = comm.Get_rank(), comm.Get_size()
    s.add("v", (np.arange(4 * 3, dtype=np.float32).reshape(4, 3) + 100 * r))
    idx = [4 * k + j for k in range(n) for j in (3, 0)]
    want = np.empty((len(idx), 3), np.float32)
    s.get_batch("v", want, idx)
    got = torch.empty((len(idx), 3))
    ext.get_batch(s, "v", got, idx)
    ok = np.array_equal(got.numpy(), want)
    with s.open_reader() as rd:
        got2 = torch.zeros_like(got)
        ext.get_batch(rd, "v", got2, idx)
        ok = ok and np.array_equal(got2.numpy(), want)
    # KeyError subclass from the torch side, pyddstore's own class
    with pytest.raises(pyddstore.DDStoreKeyError, match="nope"):
        ext.get_batch(s, "nope", got, idx)
    with pytest.raises(IndexError):
        ext.get_batch(s, "v", got[:1], [4 * n])
    with pytest.raises(TypeError):
        ext.get_batch(s, "v", got[:1], [0.5])
    with pytest.raises(IndexError):
        ext.get_batch(s, "v", got[:1], np.array([2 ** 63], dtype=np.uint64))
    ext.get_batch(s, "v", got[:2], np.array([1, 0], dtype=np.uint16))
    ok = ok and np.array_equal(got[:2].numpy(), s_rows(s, [1, 0]))
    s.free()
    assert_all(comm, ok, "the torch extension read other rows than _core")


def s_rows(s, rows):
    out = np.empty((len(rows), 3), np.float32)
    s.get_batch("v", out, rows)
    return out
