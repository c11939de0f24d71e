"""pyddstore.FileComm: a communicator over files in a shared directory, in
plain Python processes started without mpirun (rank/size from
SLURM_PROCID/SLURM_NTASKS), with PyDDStore(FileComm, method=1).

These spawn their own processes, so they run on rank 0 only."""
import os
import stat
import subprocess
import sys
import textwrap

import pytest

import pyddstore


def _rank():
    for v in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"):
        if v in os.environ:
            return int(os.environ[v])
    return 0


pytestmark = pytest.mark.skipif(_rank() != 0, reason="subprocess tests run on rank 0 only")

# launcher variables that must not leak into the plain processes
_LAUNCH = ("OMPI_", "PMIX_", "PMI_", "HYDRA_", "SLURM_")
_KEEP = {"OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"}


def _env(top, rank, size, extra=None):
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith(_LAUNCH) and k not in _KEEP)}
    env["PYTHONPATH"] = top
    env["SLURM_PROCID"] = str(rank)
    env["SLURM_NTASKS"] = str(size)
    env.update(extra or {})
    return env


def _spawn(top, n, code, extra=None, timeout=120):
    """Start n plain interpreters running `code`; return [(rc, out, err)]."""
    prelude = "import sys; sys.path.insert(0, %r)\n" % top
    procs = [subprocess.Popen([sys.executable, "-c", prelude + textwrap.dedent(code)],
                              env=_env(top, r, n, extra), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for r in range(n)]
    res = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            res.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return res


def _all_ok(res):
    for r, (rc, out, err) in enumerate(res):
        assert rc == 0, "rank %d rc %d\nstdout:\n%s\nstderr:\n%s" % (r, rc, out, err)
        assert "Traceback" not in err, err


# ---- the communicator alone (any build) ----------------------------------

@pytest.mark.parametrize("n", [2, 3])
def test_collectives_in_plain_processes(top, tmp_path, n):
    code = """
        import os, pyddstore
        fc = pyddstore.FileComm(%r, ns="coll")
        n = int(os.environ["SLURM_NTASKS"])
        assert (fc.rank, fc.size) == (int(os.environ["SLURM_PROCID"]), n), (fc.rank, fc.size)
        assert fc.ns == "coll" and fc.dir == %r
        for k in range(30):
            got = fc.allgather_bytes(b"r%%d-%%d" %% (fc.rank, k) * (fc.rank + 1))
            assert got == [b"r%%d-%%d" %% (j, k) * (j + 1) for j in range(n)], got
            fc.barrier()
        assert fc.allgather_bytes(b"") == [b""] * n
        print("ok", fc.rank)
    """ % (str(tmp_path), str(tmp_path))
    res = _spawn(top, n, code)
    _all_ok(res)
    assert [out.split() for _, out, _ in res] == [["ok", str(r)] for r in range(n)]
    ns = tmp_path / "coll"
    assert stat.S_IMODE(ns.stat().st_mode) == 0o700
    files = list(ns.iterdir())
    assert len(files) <= 2 * n, files   # old steps are deleted
    for f in files:
        assert stat.S_IMODE(f.stat().st_mode) == 0o600


def test_timeout_names_missing_rank(top, tmp_path):
    # rank 1 of 3 never starts: ranks 0 and 2 fail within the timeout
    code = """
        import os, time, pyddstore
        fc = pyddstore.FileComm(%r, ns="to", timeout=5)  # > start-up skew
        t0 = time.monotonic()
        try:
            fc.barrier()
        except pyddstore.DDStoreError as e:
            assert "waiting for 1 of 3 ranks, which did not enter it: 1" in str(e), str(e)
            assert time.monotonic() - t0 < 30
            print("timeout ok")
        else:
            raise AssertionError("barrier without rank 1 returned")
    """ % str(tmp_path)
    prelude = "import sys; sys.path.insert(0, %r)\n" % top
    procs = [subprocess.Popen([sys.executable, "-c", prelude + textwrap.dedent(code)],
                              env=_env(top, r, 3), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for r in (0, 2)]
    try:
        for p in procs:
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0, err
            assert "timeout ok" in out
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_bad_arguments(tmp_path, monkeypatch):
    for v in ("SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK",
              "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "SLURM_JOB_ID",
              "SLURM_STEP_ID"):
        monkeypatch.delenv(v, raising=False)
    with pytest.raises(ValueError, match="size must be >= 1"):
        pyddstore.FileComm(str(tmp_path), rank=0, size=0)
    with pytest.raises(ValueError, match=r"rank must be in \[0, 2\), got 2"):
        pyddstore.FileComm(str(tmp_path), rank=2, size=2)
    with pytest.raises(ValueError, match="rank must be >= 0"):
        pyddstore.FileComm(str(tmp_path), rank=-1, size=2)
    with pytest.raises(ValueError, match="SLURM_PROCID"):
        pyddstore.FileComm(str(tmp_path))
    with pytest.raises(ValueError, match="ns 'a/b'"):
        pyddstore.FileComm(str(tmp_path), rank=0, size=1, ns="a/b")
    f = tmp_path / "plain"
    f.write_text("x")
    with pytest.raises(ValueError, match="not a directory"):
        pyddstore.FileComm(str(f), rank=0, size=1)
    with pytest.raises(ValueError, match="timeout"):
        pyddstore.FileComm(str(tmp_path), rank=0, size=1, timeout=0)
    # defaults: the namespace from SLURM_JOB_ID/SLURM_STEP_ID, else "default"
    fc = pyddstore.FileComm(str(tmp_path), rank=0, size=1)
    assert (fc.rank, fc.size, fc.ns) == (0, 1, "default")
    fc.barrier()
    assert fc.allgather_bytes(b"abc") == [b"abc"]
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_STEP_ID", "7")
    monkeypatch.setenv("SLURM_PROCID", "0")
    monkeypatch.setenv("SLURM_NTASKS", "1")
    fc = pyddstore.FileComm(tmp_path)   # a path-like dir
    assert (fc.rank, fc.size, fc.ns) == (0, 1, "42.7")
    assert fc.path == os.path.join(str(tmp_path), "42.7")
    assert "FileComm rank 0 of 1" in repr(fc)


def test_method0_needs_mpi(tmp_path):
    fc = pyddstore.FileComm(str(tmp_path), rank=0, size=1, ns="m0")
    exc = ValueError if pyddstore.HAVE_MPI else pyddstore.DDStoreError
    with pytest.raises(exc, match="method 0 .*MPI"):
        pyddstore.PyDDStore(fc, method=0)


# ---- PyDDStore(FileComm, method=1) ---------------------------------------

_STORE = """
    import os, numpy as np, pyddstore
    fc = pyddstore.FileComm(%r)
    r, n = fc.rank, fc.size
    rows = 3 + r                     # uneven shards
    start = sum(3 + j for j in range(r))
    total = sum(3 + j for j in range(n))
    shard = np.array([[g * 10 + c for c in range(4)] for g in range(start, start + rows)],
                     dtype=np.float64)
    s = pyddstore.PyDDStore(fc, method=1)
    s.add("v", shard)
    out = np.zeros((total, 4), np.float64)
    idx = np.arange(total, dtype=np.int64)[::-1].copy()   # every row, reversed
    s.get_batch("v", out, idx)
    want = np.array([[g * 10 + c for c in range(4)] for g in idx], dtype=np.float64)
    assert np.array_equal(out, want), (out, want)
    one = np.zeros((1, 4), np.float64)
    for g in range(total):
        s.get("v", one, g)
        assert one[0, 0] == g * 10, (g, one)
    fc.barrier()                     # nobody frees while a peer still reads
    s.free()
    # a second store over the same FileComm
    s2 = pyddstore.PyDDStore(fc, method=1)
    s2.add("w", np.full((2, 2), r, np.int32))
    o2 = np.zeros((2 * n, 2), np.int32)
    s2.get_batch("w", o2, np.arange(2 * n))
    assert [int(x) for x in o2[:, 0]] == [j for j in range(n) for _ in range(2)], o2
    fc.barrier()
    s2.free()
    print("store ok", r)
"""


@pytest.mark.parametrize("fabric", ["tcp;ofi_rxm", "shm"])
@pytest.mark.parametrize("n", [2, 3])
def test_store_method1_over_filecomm(top, tmp_path, n, fabric):
    if not pyddstore.HAVE_OFI:
        pytest.skip("method 1 needs the libfabric transport, and this build has none "
                    "(pyddstore.HAVE_OFI is False)")
    extra = {"DDSTORE_FABRIC": fabric}
    if fabric.startswith("tcp"):
        extra["FI_TCP_IFACE"] = "lo"   # keep the traffic on 127.0.0.1
    res = _spawn(top, n, _STORE % str(tmp_path / "fc"), extra=extra, timeout=180)
    _all_ok(res)
    for r, (_, out, _) in enumerate(res):
        assert "store ok %d" % r in out
