"""Shards that cannot fit, and a full /dev/shm: errors, never a signal.

- init() / init_ragged() of far more than the machine has (10 TiB) raises
  MemoryError on every rank before anything is reserved, methods 0 and 1
  (method 1 used to reserve its memfd page by page until the OOM killer ran);
  the store stays usable.
- In a private mount namespace with a 64 KiB tmpfs on /dev/shm: a method-1
  shard larger than /dev/shm works (memfd pages do not come from it); with
  /dev/shm then filled, a method-2 core's first add() raises MemoryError
  naming /dev/shm (its liveness table was sized sparse and the first slot
  write was a SIGBUS).
Each case runs in processes of its own: 1-rank stage only.
"""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import pyddstore
from _util import job_env, launch_size as _world_size

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
DDRUN = os.path.join(TOP, "tools", "ddrun")

pytestmark = pytest.mark.skipif(
    _world_size() != 1, reason="these tests start their own processes: 1-rank stage only")


def _env(top, extra=None):
    return job_env(top, dict({"DDSTORE_FABRIC": "tcp", "DDSTORE_PROGRESS": "0"}, **(extra or {})))


_TOO_BIG = textwrap.dedent("""
    import sys
    import numpy as np
    import pyddstore
    from mpi4py import MPI
    method = int(sys.argv[1])
    rank = MPI.COMM_WORLD.Get_rank()
    # one file per rank: the ranks' stdout lines interleave through mpirun
    res = open(f"{sys.argv[2]}/result.{rank}", "w", buffering=1)
    s = pyddstore.PyDDStore(MPI.COMM_WORLD, method=method)
    for call in ("init", "init_ragged"):
        try:
            if call == "init":
                s.init("huge", 10 * 2**40 // 8, 1, 8)        # 10 TiB on each rank
            else:
                s.init_ragged("huge", np.full(4, 2**40, dtype=np.uint64), 1, dtype="float64")
            print(f"RESULT {rank} {call} passed", file=res)
        except MemoryError as e:
            print(f"RESULT {rank} {call} MemoryError {e}", file=res)
        except Exception as e:
            print(f"RESULT {rank} {call} {type(e).__name__} {e}", file=res)
    s.add("small", np.full((3, 2), rank, dtype=np.float32))   # still usable
    out = np.zeros((6, 2), dtype=np.float32)
    s.get("small", out, 0)
    print(f"RESULT {rank} after {out[:, 0].tolist()}", file=res)
    s.free()
""")


@pytest.mark.parametrize("method", [0, 1])
def test_a_shard_larger_than_memory_is_refused_on_every_rank(top, tmp_path, method):
    if not pyddstore.HAVE_MPI:
        pytest.skip("needs an MPI build (HAVE_MPI False)")
    if method == 1 and not pyddstore.HAVE_OFI:
        pytest.skip("method 1 needs libfabric (HAVE_OFI False)")
    script = tmp_path / "too_big.py"
    script.write_text(_TOO_BIG)
    p = subprocess.run([DDRUN, "-n", "2", "--timeout", "120", "--", sys.executable,
                        str(script), str(method), str(tmp_path)], env=_env(top),
                       capture_output=True,
                       text=True, timeout=180)
    text = p.stdout + p.stderr
    assert p.returncode == 0, text
    for r in range(2):
        lines = (tmp_path / f"result.{r}").read_text().splitlines()
        for call in ("init", "init_ragged"):
            line = next((ln for ln in lines if ln.startswith(f"RESULT {r} {call} ")), "")
            assert "MemoryError" in line, (lines, text)
            assert "'huge'" in line and "does not fit in the memory" in line, line
        assert f"RESULT {r} after [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]" in lines, (lines, text)


_SMALL_SHM = textwrap.dedent("""
    import os, sys
    import numpy as np
    import pyddstore
    d = sys.argv[1]
    fc = pyddstore.FileComm(os.path.join(d, "fc"), rank=0, size=1, ns="m1")
    s = pyddstore.PyDDStore(fc, method=1)
    s.init("big", 1 << 20, 1, 1)                    # 1 MiB, /dev/shm has 64 KiB
    print("RESULT method1 ok", flush=True)
    s.free()
    fd = os.open("/dev/shm/fill", os.O_WRONLY | os.O_CREAT, 0o600)   # /dev/shm full
    try:
        while os.write(fd, b"x" * 4096) > 0:
            pass
    except OSError:
        pass
    os.close(fd)
    hs = os.path.join(d, "hs")
    os.makedirs(hs, mode=0o700)
    fc2 = pyddstore.FileComm(os.path.join(d, "fc"), rank=0, size=1, ns="m2")
    core = pyddstore.PyDDStore(fc2, method=2, handshake_dir=hs)
    try:
        core.add("a", np.ones((4, 2), dtype=np.float32))
        print("RESULT method2 passed", flush=True)
    except MemoryError as e:
        print("RESULT method2 MemoryError", e, flush=True)
    core.free()
""")


def test_a_full_dev_shm_is_an_error_never_a_sigbus(top, tmp_path):
    if not pyddstore.HAVE_OFI:
        pytest.skip("methods 1 and 2 need libfabric (HAVE_OFI False)")
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) is not installed: no private mount namespace")
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                            "mount -t tmpfs -o size=64k tmpfs /dev/shm"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("a private mount namespace with a tmpfs on /dev/shm is not allowed "
                    f"here: {probe.stderr.strip()}")
    script = tmp_path / "small_shm.py"
    script.write_text(_SMALL_SHM)
    os.chmod(tmp_path, 0o700)
    p = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                        'mount -t tmpfs -o size=64k,mode=1777 tmpfs /dev/shm && exec "$@"',
                        "sh", sys.executable, str(script), str(tmp_path)],
                       env=_env(top), capture_output=True, text=True, timeout=180)
    text = p.stdout + p.stderr
    assert p.returncode == 0, f"status {p.returncode} (-7/135: SIGBUS)\n{text}"
    assert "RESULT method1 ok" in text, text
    line = next((ln for ln in text.splitlines() if ln.startswith("RESULT method2")), "")
    assert "MemoryError" in line and "/dev/shm" in line and "liveness table" in line, text
