"""Collectives never hang a job: a collective call entered by only some ranks
fails on them within DDSTORE_COLLECTIVE_TIMEOUT_S (DDStoreError naming the
call), the store then refuses further collectives at once and free()
releases locally; the rank that skipped the call fails its next collective
(never matches the others' abandoned one).  Over MPI, FileComm and
torch.distributed; each case is a job of its own (coll_timeout_job.py), so
these run in the 1-rank stage only."""
import os
import re
import subprocess
import sys

import pytest

import pyddstore
from _util import launch_size as _world_size

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
DDRUN = os.path.join(TOP, "tools", "ddrun")
JOB = os.path.join(HERE, "coll_timeout_job.py")
T = 3.0        # DDSTORE_COLLECTIVE_TIMEOUT_S of the jobs
N = 3          # ranks; rank 1 skips the call


pytestmark = pytest.mark.skipif(
    _world_size() != 1, reason="these tests launch their own jobs: 1-rank stage only")

_LAUNCH = ("OMPI_", "PMIX_", "PMI_", "HYDRA_", "SLURM_")
_KEEP = {"OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "OMPI_MCA_btl",
         "OMPI_MCA_rmaps_base_oversubscribe"}


def _env(top, extra=None):
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith(_LAUNCH) and k not in _KEEP)}
    env.update({"PYTHONPATH": top, "DDSTORE_COLLECTIVE_TIMEOUT_S": str(T),
                "DDSTORE_FABRIC": "shm", "DDSTORE_PROGRESS": "0"})
    env.update(extra or {})
    return env


def _have_torch():
    try:
        import torch  # noqa: F401
        import torch.distributed as dist
        return dist.is_available()
    except ImportError:
        return False


def _run(top, kind, call, tmp_path):
    args = [sys.executable, JOB, "--comm", kind, "--call", call, "--skip", "1",
            "--dir", str(tmp_path)]
    if kind in ("mpi", "mpibytes"):
        p = subprocess.run([DDRUN, "-n", str(N), "--timeout", "120", "--"] + args,
                           env=_env(top), capture_output=True, text=True, timeout=180)
        text = p.stdout + p.stderr
    else:
        procs = [subprocess.Popen(args, env=_env(top, {"SLURM_PROCID": str(r),
                                                        "SLURM_NTASKS": str(N)}),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for r in range(N)]
        text = ""
        for p in procs:
            try:
                text += p.communicate(timeout=120)[0]
            except subprocess.TimeoutExpired:
                p.kill()
                text += p.communicate()[0] + "\n(killed: hung)\n"
    for r in range(N):
        try:
            with open(os.path.join(tmp_path, f"result.{r}")) as f:
                text += "\n" + f.read()
        except OSError:
            text += f"\n(no result file of rank {r})\n"
    res = {}
    for m in re.finditer(r"^RESULT (\d+) (\S+) (.*)$", text, re.M):
        res[(int(m.group(1)), m.group(2))] = m.group(3)
    return res, text


# mpibytes: DistDataset over mpi4py with the Python byte mover (_MpiBytes: the
# fallback for an mpi4py over another MPI library than pyddstore's)
CASES = ([("mpi", c) for c in ("add", "init", "free", "epoch_begin", "epoch_end", "dataset")]
         + [("mpibytes", "dataset")]
         + [("file", c) for c in ("add", "free", "epoch_begin", "dataset")]
         + [("torch", c) for c in ("init", "epoch_end", "dataset")])


@pytest.mark.parametrize("kind,call", CASES, ids=[f"{k}-{c}" for k, c in CASES])
def test_a_rank_skipping_a_collective_never_hangs_the_others(top, tmp_path, kind, call):
    if kind in ("mpi", "mpibytes") and not pyddstore.HAVE_MPI:
        pytest.skip("needs an MPI build (HAVE_MPI False)")
    if kind in ("file", "torch") and not pyddstore.HAVE_OFI:
        pytest.skip("method 1 needs libfabric (HAVE_OFI False)")
    if (kind == "torch" or call == "dataset") and not _have_torch():
        pytest.skip("needs torch with torch.distributed")
    res, text = _run(top, kind, call, tmp_path)
    for r in range(N):
        assert res.get((r, "setup")) == "ok", text
        if call != "dataset":
            # free() of a store out of step releases locally: no wait
            assert res.get((r, "free")) == "ok", text
            assert float(res[(r, "free_s")]) < 2.0, text
    name = {"dataset": "DistDataset('ds')"}.get(call, call)
    for r in (0, 2):
        got = res[(r, "call")]
        assert got.startswith("raised DDStoreError"), text
        # a timeout, or (when the late rank's next call met theirs first) a
        # collective mismatch: either way an error naming the call
        assert name in got and ("timed out after" in got or "collective mismatch" in got), got
        assert float(res[(r, "call_s")]) <= T + 10, text
        if call != "dataset":
            after = res[(r, "after")]
            assert after.startswith("raised") and "out of step" in after, after
            assert float(res[(r, "after_s")]) < 1.0, text
    # the rank that skipped: its next collective fails too, within the timeout
    assert res[(1, "next")].startswith("raised"), text
    assert float(res[(1, "next_s")]) <= T + 10, text
