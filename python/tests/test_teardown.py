"""Teardown is quiet and leaves nothing behind: freeing a DistDataset after
the torch.distributed group is gone, or never freeing it before the
interpreter exits, ends the job with status 0, no traceback, at most one
warning line, no /dev/shm file of the job's processes (libfabric's shm
regions are named "<pid>:...") and an empty handshake directory (method 2:
records, meta.json).  Each case is a 2-rank job of its own
(teardown_job.py), so these run in the 1-rank stage only."""
import os
import re
import socket
import subprocess
import sys

import pytest

import pyddstore
from _util import launch_size as _world_size

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
DDRUN = os.path.join(TOP, "tools", "ddrun")
JOB = os.path.join(HERE, "teardown_job.py")


pytestmark = [
    pytest.mark.skipif(_world_size() != 1,
                       reason="these tests launch their own jobs: 1-rank stage only"),
    pytest.mark.skipif(not pyddstore.HAVE_MPI, reason="the jobs are launched with MPI"),
]

_LAUNCH = ("OMPI_", "PMIX_", "PMI_", "HYDRA_", "SLURM_")
_KEEP = {"OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "OMPI_MCA_btl",
         "OMPI_MCA_rmaps_base_oversubscribe"}


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


CASES = [("pg_gone_free", 1), ("pg_gone_exit", 2), ("exit", 0)]


@pytest.mark.parametrize("mode,method", CASES, ids=[f"{m}-method{k}" for m, k in CASES])
def test_teardown_is_quiet_and_leaves_nothing(tmp_path, mode, method):
    if method in (1, 2) and not pyddstore.HAVE_OFI:
        pytest.skip("a build without libfabric (methods 1 and 2)")
    hs = tmp_path / "hs"
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith(_LAUNCH) and k not in _KEEP)}
    env.update({"PYTHONPATH": os.path.join(TOP, "python"), "DDSTORE_PROGRESS": "0",
                "DDSTORE_FABRIC": "shm"})
    p = subprocess.run([DDRUN, "-n", "2", "--timeout", "150", "--", sys.executable, JOB,
                        mode, str(method), str(hs), _free_port()],
                       env=env, capture_output=True, text=True, timeout=200)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "Traceback" not in out, out
    # (the ranks' lines may interleave on the launcher's stdout)
    assert sorted(re.findall(r"done (\d)", p.stdout)) == ["0", "1"], out
    noise = [x for x in p.stderr.splitlines() if x.strip()]
    assert len(noise) <= 1, "more than one line on stderr:\n" + p.stderr
    pids = [pid for _, pid in re.findall(r"pid (\d) (\d+)", p.stdout)]
    assert len(pids) == 2, out
    left = [f for f in os.listdir("/dev/shm") if f.split(":")[0] in pids]
    assert not left, f"/dev/shm files of the job's processes left: {left}"
    if hs.exists():
        assert not os.listdir(hs), f"left in the handshake directory: {os.listdir(hs)}"
