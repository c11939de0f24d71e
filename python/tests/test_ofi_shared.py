"""Method 1: the stores of a process share one fabric, one server endpoint
and one reading endpoint (issue 25: 140 MiB of private memory per store per
rank over tcp;ofi_rxm before).  Several stores in one process read the right
rows, whatever the order they are closed in, from several threads, next to
a method-2 reader and in forked children; the shared objects are counted
(ddofi_transport_shared_counts).

Run at 2 ranks:  tools/ddrun -n 2 -- .venv/bin/python -m pytest -q python/tests/test_ofi_shared.py
"""
import ctypes
import os
import threading

import numpy as np
import pytest

import pyddstore

pytestmark = pytest.mark.skipif(not pyddstore.HAVE_OFI,
                                reason="method 1 needs libfabric; this build has none (HAVE_OFI False)")

FABRICS = ["tcp", "shm"]


def _counts():
    lib = ctypes.CDLL(os.path.join(os.path.dirname(pyddstore.__file__), "libddstore.so"))
    fab, ep = ctypes.c_int(-1), ctypes.c_int(-1)
    lib.ddofi_transport_shared_counts(ctypes.byref(fab), ctypes.byref(ep))
    return fab.value, ep.value


def _rows(rank, k, n=5, disp=3):
    """Rank `rank`'s shard of store k: distinct per store, rank and row."""
    g = np.arange(n, dtype=np.int64).reshape(-1, 1) + rank * n
    return (g * 1000 + k * 100 + np.arange(disp)).astype(np.int64)


def _check(s, k, n=5):
    total = n * s.size
    out = np.zeros((total, 3), np.int64)
    s.get("v", out, 0)
    want = np.concatenate([_rows(r, k, n) for r in range(s.size)])
    np.testing.assert_array_equal(out, want)
    idx = np.random.default_rng(k).integers(0, total, 64)
    b = np.zeros((64, 3), np.int64)
    s.get_batch("v", b, idx)
    np.testing.assert_array_equal(b, want[idx])


def _check_all_shared(stores):
    """Every store reads its rows, and all of them share one fabric, one
    server endpoint and one reading endpoint."""
    for k, s in enumerate(stores):
        _check(s, k)
    assert _counts() == (1, 2)


def _open(k):
    s = pyddstore.PyDDStore(None, method=1)
    s.add("v", _rows(s.rank, k))
    return s


@pytest.fixture(params=FABRICS)
def fabric(request, monkeypatch):
    monkeypatch.setenv("DDSTORE_FABRIC", request.param)
    assert _counts() == (0, 0), "a store of an earlier test is still open"
    yield request.param
    assert _counts() == (0, 0), "the shared fabric outlived its stores"


def test_three_stores_share_one_fabric_and_two_endpoints(fabric):
    stores = [_open(k) for k in range(3)]
    try:
        _check_all_shared(stores)
    finally:
        for s in stores:
            s.free()


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 0, 1), (1, 2, 0)])
def test_closing_one_store_leaves_the_others_reading(fabric, order):
    stores = {k: _open(k) for k in range(3)}
    for n, k in enumerate(order):
        stores.pop(k).free()
        for j in stores:  # (no loop variable keeping a freed store alive)
            _check(stores[j], j)
        if stores:
            assert _counts() == (1, 2)
    assert _counts() == (0, 0)
    # and a store opened after the last closed makes them again
    s = _open(7)
    try:
        _check(s, 7)
        assert _counts() == (1, 2)
    finally:
        s.free()


def test_threads_read_two_stores_at_once(fabric):
    a, b = _open(1), _open(2)
    errors = []

    def work(s, k):
        try:
            for _ in range(20):
                _check(s, k)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    try:
        th = [threading.Thread(target=work, args=(s, k))
              for s, k in [(a, 1), (b, 2), (a, 1), (b, 2)]]
        for t in th:
            t.start()
        for t in th:
            t.join()
        assert not errors, errors
        assert _counts() == (1, 2)
    finally:
        a.free()
        b.free()


def test_different_settings_do_not_share(fabric, monkeypatch):
    a = _open(1)
    monkeypatch.setenv("DDSTORE_READ_TIMEOUT_S", "77")
    b = _open(2)
    try:
        _check(a, 1)
        _check(b, 2)
        assert _counts() == (2, 4)
    finally:
        a.free()
        b.free()


def test_forked_children_read_every_store(fabric, monkeypatch):
    """Forked readers (DataLoader workers) of the child share the child's own
    fabric and reading endpoint; the parent's stay the parent's."""
    monkeypatch.setenv("DDSTORE_FORK_WORKERS", "1")
    stores = [_open(k) for k in range(2)]
    try:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: no pytest, no exceptions out
            code = 1
            try:
                os.close(r)
                for k, s in enumerate(stores):
                    _check(s, k)
                code = 0 if _counts() == (1, 1) else 2
                os.write(w, repr(_counts()).encode())
            except BaseException as e:  # noqa: BLE001
                os.write(w, repr(e).encode()[:500])
            finally:
                os._exit(code)
        os.close(w)
        msg = os.read(r, 1000).decode()
        os.close(r)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, msg
        _check_all_shared(stores)
    finally:
        for s in stores:
            s.free()


def test_method2_core_and_reader_next_to_a_method1_store(fabric, tmp_path):
    """A method-1 store, a method-2 core store and a method-2 reader of that
    core job in one process: each reads its own rows, closed in any order."""
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    hs = comm.bcast(str(tmp_path / "hs") if comm.rank == 0 else None, root=0)
    a = _open(1)
    core = pyddstore.PyDDStore(None, method=2, handshake_dir=hs)
    core.add("v", _rows(core.rank, 5))
    comm.Barrier()
    reader = pyddstore.PyDDStore(None, method=2, handshake_dir=hs, n_core=core.size)
    try:
        reader.join("v")
        _check(reader, 5)
        _check(core, 5)
        _check(a, 1)
        a.free()
        a = None
        _check(reader, 5)
        _check(core, 5)
    finally:
        comm.Barrier()
        reader.free()
        if a is not None:
            a.free()
        core.free()


def _env_after_import(top, extra):
    """FI_OFI_RXM_MSG_RX_SIZE as a fresh interpreter sees it after importing
    pyddstore (no MPI, no store), with `extra` set and the inherited
    FI_/DDSTORE_ settings removed."""
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FI_", "DDSTORE_", "OMPI_", "PMIX_"))}
    env.update(extra)
    env["PYTHONPATH"] = top
    code = "import os, pyddstore; print(os.environ.get('FI_OFI_RXM_MSG_RX_SIZE', 'unset'))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120, check=True)
    return out.stdout.strip()


def _store_error(top, tmp_path, extra):
    """What creating a one-rank method-1 store over tcp raises in a fresh
    interpreter with `extra` set (the inherited settings removed): "Type
    message", or "" when it was created (and freed)."""
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FI_", "DDSTORE_", "OMPI_", "PMIX_", "SLURM_"))}
    env.update(extra, PYTHONPATH=top, DDSTORE_FABRIC="tcp")
    code = ("import pyddstore\n"
            "try:\n"
            "    pyddstore.PyDDStore(pyddstore.FileComm(%r, 0, 1, 'e'), method=1).free()\n"
            "except Exception as e:\n"
            "    print(type(e).__name__, e)\n") % str(tmp_path)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120).stdout


def test_rx_buffers_setting(top, tmp_path):
    """DDSTORE_OFI_RX_BUFFERS sizes ofi_rxm's receive queue (64 by default),
    never over the user's own FI_OFI_RXM_MSG_RX_SIZE; 0 leaves libfabric's."""
    assert _env_after_import(top, {}) == "64"
    assert _env_after_import(top, {"DDSTORE_OFI_RX_BUFFERS": "256"}) == "256"
    assert _env_after_import(top, {"DDSTORE_OFI_RX_BUFFERS": "0"}) == "unset"
    assert _env_after_import(top, {"DDSTORE_OFI_RX_BUFFERS": "-3"}) == "unset"
    assert _env_after_import(top, {"FI_OFI_RXM_MSG_RX_SIZE": "300"}) == "300"
    # above the bound: never forwarded (ofi_rxm refused it naming no setting, and
    # 16,384-65,536 were OOM-killed first); the store names the variable
    assert _env_after_import(top, {"DDSTORE_OFI_RX_BUFFERS": "70000"}) == "unset"
    out = _store_error(top, tmp_path, {"DDSTORE_OFI_RX_BUFFERS": "70000"})
    assert "DDSTORE_OFI_RX_BUFFERS=70000" in out and "4096" in out, out


def test_closing_a_store_while_another_is_read_from_threads(fabric):
    keep, gone = _open(1), _open(2)
    stop = threading.Event()
    errors, rounds = [], [0]

    def work():
        try:
            while not stop.is_set() or rounds[0] < 5:
                _check(keep, 1)
                rounds[0] += 1
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    th = [threading.Thread(target=work) for _ in range(2)]
    for t in th:
        t.start()
    try:
        gone.free()          # collective, while both threads read `keep`
        gone = None
        stop.set()
        for t in th:
            t.join()
        assert not errors, errors
        _check(keep, 1)
        assert _counts() == (1, 2)
    finally:
        stop.set()
        for t in th:
            t.join()
        if gone is not None:
            gone.free()
        keep.free()


@pytest.mark.parametrize("var,value,says", [
    ("FABRIC_IFACE", "nosuch0", '"nosuch0" (from FABRIC_IFACE)'),
    ("DDSTORE_NIC_MAP", "1:foo", 'DDSTORE_NIC_MAP="1:foo" has no entry for local rank 0')])
def test_interface_errors_name_the_variable(top, tmp_path, var, value, says):
    """An interface that does not fit names the variable it came from (they said
    "iface parameter" / "nic_map parameter": issue 36 item 5)."""
    out = _store_error(top, tmp_path, {var: value})
    assert out.startswith("ValueError") and says in out, out
