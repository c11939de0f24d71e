"""The hub's backend table as Python sees it (pyddstore._core.backends()),
and the test transports: every one-process row (the in-process loopback)
read through PyDDStore(method=...) at one rank; at more ranks its creation
fails on every rank with an error saying why."""
import numpy as np
import pytest

import pyddstore
from pyddstore import DDStoreError, _backends, _core
from _util import add_var, values


def _world_size():
    if not pyddstore.HAVE_MPI:
        return 1
    from mpi4py import MPI
    return MPI.COMM_WORLD.size


def test_table():
    rows = _core.backends()
    methods = [r["method"] for r in rows]
    assert methods == sorted(set(methods)) and {0, 1, 2} <= set(methods)
    by = {r["method"]: r for r in rows}
    assert by[0]["needs_mpi_comm"] and by[0]["built"] == pyddstore.HAVE_MPI
    assert by[1]["built"] == by[2]["built"] == pyddstore.HAVE_OFI
    assert by[2]["needs_handshake"] and by[1]["thread_readers"]
    for r in rows:
        assert r["built"] or r["why_not_built"], r
        assert _backends.row(r["method"]) == r
    # the default: the first row an MPI communicator / another one can use
    assert _core.default_method(True) == 0
    assert _core.default_method(False) == 1


def test_versions_name_every_transport_library():
    info = _core.build_info()
    for r in _core.backends():
        assert r["library"] in info, (r["library"], info)
        assert info[r["library"]].startswith("not built") == (not r["built"])


def test_unknown_method_lists_the_table(monkeypatch):
    bad = max(r["method"] for r in _core.backends()) + 1
    with pytest.raises(ValueError, match=r"expected one of 0 \(MPI RMA\), 1"):
        pyddstore.PyDDStore(None, method=bad)
    with pytest.raises(ValueError, match="method must be one of"):
        _backends.row(bad)
    monkeypatch.setenv("DDSTORE_METHOD", str(bad))
    with pytest.raises(ValueError, match=f"DDSTORE_METHOD='{bad}'"):
        _core.method_from_env()
    # checked even when method= is given (it was ignored then: issue 36 item 5)
    with pytest.raises(ValueError, match=f"DDSTORE_METHOD='{bad}'"):
        pyddstore.PyDDStore(None, method=0)
    monkeypatch.setenv("DDSTORE_METHOD", "1")
    assert _core.method_from_env() == 1


ONE_PROCESS = [r for r in _core.backends() if r["one_process"]]


@pytest.mark.parametrize("row", ONE_PROCESS or [None],
                         ids=[r["name"] for r in ONE_PROCESS] or ["none"])
def test_one_process_transport(row):
    if row is None:
        pytest.skip("this build has no one-process (test) transport in the "
                    "hub's table (//bazel/config:loop off)")
    if not row["built"]:
        pytest.skip(f"method {row['method']}: {row['why_not_built']}")
    m = row["method"]
    assert row["test_only"] and _core.default_method(False) != m
    if _world_size() > 1:
        # every rank is another process: every rank fails, naming the reason
        with pytest.raises(DDStoreError, match="only ranks in one process"):
            pyddstore.PyDDStore(None, method=m)
        return
    with pyddstore.PyDDStore(None, method=m) as s:
        assert s.method == m
        for dt, disp in ((np.float64, 3), (np.int32, 1), (np.uint8, 5)):
            name = f"v_{np.dtype(dt).name}"
            off = add_var(s, name, dt, disp)
            n = off[-1]
            want = values(dt, range(n), disp)
            row_ = np.zeros((1, disp), dt)
            for g in range(n):          # every row, one read each
                s.get(name, row_, g)
                np.testing.assert_array_equal(row_[0], want[g])
            whole = np.zeros((n, disp), dt)
            s.get(name, whole)
            np.testing.assert_array_equal(whole, want)
        # past the end: IndexError (reference-pyddstore.md, Errors), and the
        # store keeps working
        with pytest.raises(IndexError, match="range"):
            s.get("v_float64", np.zeros((2, 3)), n - 1)
        s.get("v_uint8", whole)
        np.testing.assert_array_equal(whole, want)
        s.free()
