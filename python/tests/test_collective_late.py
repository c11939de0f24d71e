"""A collective that a rank enters late, or never (coll_late_job.py, each case
a job of its own, so these run in the 1-rank stage only):

- entered late: after DDSTORE_COLLECTIVE_WARN_S the waiting rank logs once
  (WARN, visible by default) which collective is waiting and, over FileComm,
  which rank has not entered it; the call then passes on every rank.
- entered after the others timed out (MPI): they get the timeout error, and
  both processes then end without a signal (no segfault in MPI_Finalize over
  the abandoned nonblocking collective) and without hanging.
"""
import os
import re
import subprocess
import sys

import pytest

import pyddstore
from _util import job_env, launch_size as _world_size

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
DDRUN = os.path.join(TOP, "tools", "ddrun")
JOB = os.path.join(HERE, "coll_late_job.py")

pytestmark = pytest.mark.skipif(
    _world_size() != 1, reason="these tests launch their own jobs: 1-rank stage only")


def _env(top, extra):
    env = job_env(top, {"DDSTORE_FABRIC": "shm", "DDSTORE_PROGRESS": "0"})
    env.pop("DDSTORE_LOG_LEVEL", None)   # the default level (warn) shows the message
    env.update(extra)
    return env


def _need(kind):
    if kind == "mpi" and not pyddstore.HAVE_MPI:
        pytest.skip("needs an MPI build (HAVE_MPI False)")
    if kind == "file" and not pyddstore.HAVE_OFI:
        pytest.skip("method 1 needs libfabric (HAVE_OFI False)")


def _run(top, kind, tmp_path, extra, job_args):
    """The job's 2 ranks: (exit statuses, combined output, results)."""
    args = [sys.executable, JOB, "--comm", kind, "--dir", str(tmp_path)] + job_args
    if kind == "mpi":
        p = subprocess.run([DDRUN, "-n", "2", "--timeout", "120", "--"] + args,
                           env=_env(top, extra), capture_output=True, text=True, timeout=180)
        codes, text = [p.returncode], p.stdout + p.stderr
    else:
        procs = [subprocess.Popen(args, env=_env(top, dict(extra, SLURM_PROCID=str(r),
                                                           SLURM_NTASKS="2")),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for r in range(2)]
        codes, text = [], ""
        for r, p in enumerate(procs):
            try:
                out = p.communicate(timeout=120)[0]
            except subprocess.TimeoutExpired:
                p.kill()
                out = p.communicate()[0] + "\n(killed: hung)\n"
            codes.append(p.returncode)
            text += f"--- rank {r} ---\n{out}"
    res = {}
    for r in range(2):
        try:
            with open(os.path.join(tmp_path, f"result.{r}")) as f:
                body = f.read()
        except OSError:
            body = ""
            text += f"\n(no result file of rank {r})\n"
        for m in re.finditer(r"^RESULT (\d+) (\S+) (.*)$", body, re.M):
            res[(int(m.group(1)), m.group(2))] = m.group(3)
    return codes, text, res


@pytest.mark.parametrize("kind", ["mpi", "file"])
def test_a_late_rank_is_named_while_the_others_wait(top, tmp_path, kind):
    """DDSTORE_COLLECTIVE_WARN_S=1, rank 1 enters epoch_begin() 3 s late: rank
    0 says once which collective waits (and over FileComm that rank 1 has not
    entered it), then the call passes on both ranks."""
    _need(kind)
    codes, text, res = _run(top, kind, tmp_path,
                            {"DDSTORE_COLLECTIVE_WARN_S": "1",
                             "DDSTORE_COLLECTIVE_TIMEOUT_S": "120"}, ["--late", "3"])
    assert codes == [0] * len(codes), text
    assert res.get((0, "call")) == "passed" and res.get((1, "call")) == "passed", text
    warns = [ln for ln in text.splitlines() if "has waited" in ln]
    assert len(warns) == 1, text            # once, and only on the waiting rank
    w = warns[0]
    assert "rank 0" in w and "epoch_begin()" in w and "still waiting" in w, w
    assert "WARN" in w or "warn" in w, w
    if kind == "file":
        assert re.search(r"have not entered it: 1\b", w), w
    else:
        assert "not every rank has entered it" in w, w


def test_a_timed_out_epoch_begin_then_exit_without_a_signal(top, tmp_path):
    """Rank 1 enters epoch_begin() only after rank 0 timed out in it: rank 0
    gets the timeout error, rank 1's call meets rank 0's abandoned
    nonblocking collective, and both processes then exit the ordinary way
    (interpreter exit, mpi4py's MPI_Finalize) with status 0 - no segfault in
    MPI_Finalize (it was rc 139: libnbc progressing the abandoned request of a
    freed communicator), no hang (ddrun's own timeout would say 124)."""
    _need("mpi")
    codes, text, res = _run(top, "mpi", tmp_path, {"DDSTORE_COLLECTIVE_TIMEOUT_S": "2"},
                            ["--late", "4"])
    got = res.get((0, "call"), "")
    assert got.startswith("raised") and "timed out after" in got, text
    assert (1, "call") in res, text
    assert codes == [0], text
    assert "Segmentation fault" not in text and "signal" not in text.lower(), text
