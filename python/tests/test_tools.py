"""tools/ddrun and ./ddstore as a user meets them: usage errors that name
the option, the help text, and what ddrun's runs leave in /dev/shm.  They
start their own processes: the 1-rank stage runs them."""
import os
import subprocess
import sys

import pytest

from _util import launch_size as _world_size

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DDRUN = os.path.join(TOP, "tools", "ddrun")

pytestmark = pytest.mark.skipif(_world_size() != 1,
                                reason="they start their own processes: 1-rank stage only")

# the launcher's variables of the stage's own run must not reach the runs
# started here (orterun refuses "recursive calls")
_LAUNCH = ("OMPI_", "PMIX_", "PMI_", "HYDRA_", "SLURM_")
_KEEP = {"OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"}


def _env():
    return {k: v for k, v in os.environ.items() if not k.startswith(_LAUNCH) or k in _KEEP}


@pytest.mark.parametrize("args,option,value", [
    (["--nodes=", "-n", "2"], "--nodes", ""),
    (["--nodes", "99999999999999999999", "-n", "2"], "--nodes", "99999999999999999999"),
    (["--nodes", "251", "-n", "2"], "--nodes", "251"),
    (["--nodes", "0x2", "-n", "2"], "--nodes", "0x2"),
    (["-n", "0"], "-n", "0"),
    (["-n", "99999999999999999999"], "-n", "99999999999999999999"),
    (["-n", "4097"], "-n", "4097"),
    (["-n", "+2"], "-n", "+2"),
    (["-n", "2", "--timeout", "-1"], "--timeout", "-1"),
    (["-n", "2", "--timeout="], "--timeout", ""),
    (["-n", "2", "--timeout", "604801"], "--timeout", "604801"),
])
def test_ddrun_numeric_options_are_decimal_and_bounded(args, option, value):
    """A bad count is a usage error (exit 2) naming the option, its range and
    the value, never a bash message or a silent default."""
    p = subprocess.run([DDRUN] + args + ["--", "true"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2, (p.returncode, p.stderr)
    first = p.stderr.splitlines()[0]
    assert first.startswith(f"ddrun: {option}: a decimal integer from 1 to ") and \
        first.endswith(f"not '{value}'"), p.stderr
    assert "expression" not in p.stderr and "line " not in p.stderr, p.stderr


def test_ddrun_leading_zeros_are_decimal():
    """09 is nine ranks' worth of decimal, not a bash octal error."""
    p = subprocess.run([DDRUN, "-n", "09", "--timeout", "060", "--", "sh", "-c",
                        "echo ${OMPI_COMM_WORLD_SIZE:-$PMI_SIZE}"], capture_output=True,
                       text=True, timeout=120, env=_env())
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["9"] * 9, p.stdout + p.stderr


def test_ddstore_help_is_clean():
    """./ddstore help prints its text and nothing else (no shell errors, no
    word lost to a command substitution)."""
    p = subprocess.run([os.path.join(TOP, "ddstore"), "help"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert "what `bench` installs on first use" in p.stdout, p.stdout
    assert "command not found" not in p.stdout + p.stderr


def test_ddrun_removes_shm_leftovers_of_its_run(tmp_path):
    """A job ending abnormally leaves Open MPI's segments in /dev/shm:
    tools/ddrun removes them (and nothing that was there before, nothing in
    use); DDRUN_KEEP_SHM=1 keeps them."""
    pyddstore = pytest.importorskip("pyddstore")
    if not pyddstore.HAVE_MPI:
        pytest.skip("the job is an MPI job (HAVE_MPI False)")
    job = tmp_path / "leave.py"
    job.write_text("import os, signal\nfrom mpi4py import MPI\nMPI.COMM_WORLD.Barrier()\n"
                   "if MPI.COMM_WORLD.rank == 0:\n    os.kill(os.getppid(), signal.SIGKILL)\n"
                   "os.kill(os.getpid(), signal.SIGKILL)\n")
    pre = "/dev/shm/vader_segment.ddrun-test.%d" % os.getpid()
    open(pre, "w").close()
    env = _env()
    ddrun = os.path.join(TOP, "tools", "ddrun")
    try:
        before = set(os.listdir("/dev/shm"))
        for keep in ("1", "0"):
            env["DDRUN_KEEP_SHM"] = keep
            p = subprocess.run([ddrun, "-n", "2", "--timeout", "60", "--", sys.executable,
                                str(job)], env=env, capture_output=True, text=True, timeout=120)
            assert p.returncode != 0, p.stdout + p.stderr
            left = sorted(set(os.listdir("/dev/shm")) - before)
            if keep == "1":
                # the job really leaves them (else this test proves nothing)
                assert any(f.startswith("vader_segment.") for f in left), (left, p.stderr)
                for f in left:
                    os.remove(os.path.join("/dev/shm", f))
            else:
                assert left == [], (left, p.stderr)
        assert os.path.exists(pre)
    finally:
        os.remove(pre)


def _doc_signature(path, head):
    """The `DistDataset(...)` signature in the first code block after `head`."""
    import re
    with open(os.path.join(TOP, path)) as f:
        text = f.read()
    i = text.index(head)
    m = re.search(r"```python norun\n(DistDataset\(.*?\))\n```", text[i:], re.S)
    return m.group(1)


@pytest.mark.parametrize("path,head", [("docs/pytorch.md", "## DistDataset"),
                                       ("docs/reference-torch.md", "DistDataset")])
def test_docs_distdataset_signature_is_the_code(path, head):
    """The signature the guide and the reference show is the constructor's
    (pack_fields was missing from the guide's)."""
    import inspect
    pytest.importorskip("torch")
    from pyddstore.torch import DistDataset
    code = inspect.signature(DistDataset.__init__)
    want = [(n, p.default) for n, p in code.parameters.items() if n != "self"]
    args = " ".join(_doc_signature(path, head)[len("DistDataset("):-1].split())
    doc = inspect.signature(eval("lambda " + args + ": None"))
    got = [(n, p.default) for n, p in doc.parameters.items()]
    assert got == want, (path, got, want)
