"""Launchers: comm=None never builds a silent one-rank store.

Each case runs fresh plain processes (no mpirun: MPI's world has one rank)
with a launch environment set by hand:

- torch.distributed initialised over gloo by 2 processes (what torchrun
  does) in an MPI build: ``DistDataset(comm=None)`` uses the torch.distributed
  group (method 1), not a one-rank MPI store per process;
- the environment says several ranks (``WORLD_SIZE``, ``PMI_SIZE``,
  ``SLURM_STEP_NUM_TASKS``; not Open MPI's own ``OMPI_*``, which Open MPI
  reads) while the communicator resolved from None has one:
  ``DistDataset(comm=None)`` and ``PyDDStore(None)`` raise RuntimeError
  saying so and how to fix it; ``comm=MPI.COMM_SELF`` stays a deliberate
  one-rank store; ``SLURM_NTASKS`` alone (a whole allocation) is no launch;
  an explicit ``MPI.COMM_WORLD`` of one rank (the README's call under
  torchrun) is checked the same way.

They spawn their own processes, so they run on rank 0 only.
"""
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

import pyddstore  # noqa: E402
from _util import launch_rank as _rank, launch_size as _world_size  # noqa: E402

KEEP = {"OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "OMPI_MCA_btl",
        "OMPI_MCA_rmaps_base_oversubscribe"}
LAUNCH = ("OMPI_", "PMIX_", "PMI_", "HYDRA_", "SLURM_", "MV2_")
CLEAR = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "DDSTORE_COMM",
         "DDSTORE_METHOD", "DDSTORE_MPI")


# Each case starts interpreters (and jobs) of its own, the same whatever the
# rank count of the suite: they run once, in the 1-rank stage.
pytestmark = pytest.mark.skipif(
    _rank() != 0 or _world_size() != 1,
    reason="subprocess tests: they start their own processes, so they run in the 1-rank stage only")

PRELUDE = """
import os, sys
sys.path.insert(0, os.environ["PYTHONPATH"])
import numpy as np, torch
import pyddstore
from pyddstore.torch import DistDataset

def outcome(call):
    try:
        return call(), None
    except Exception as e:  # noqa: BLE001
        return None, e

src = torch.utils.data.TensorDataset(torch.arange(40, dtype=torch.float32).reshape(10, 4),
                                     torch.arange(10))
"""


def _env(top, extra):
    env = {k: v for k, v in os.environ.items()
           if not ((k.startswith(LAUNCH) and k not in KEEP) or k in CLEAR)}
    env["PYTHONPATH"] = top
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _run(top, code, envs, timeout=180):
    """Start one process per environment in `envs`, concurrently; returns
    [(rc, stdout, stderr)]."""
    procs = [subprocess.Popen([sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
                              env=_env(top, e), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for e in envs]
    out = []
    for p in procs:
        try:
            o, e = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            o, e = p.communicate()
            e += "\n(timed out)"
        out.append((p.returncode, o, e))
    return out


def _ok(results):
    for k, (rc, o, e) in enumerate(results):
        assert rc == 0 and "Traceback" not in e, \
            f"process {k}: rc {rc}\nstdout:\n{o}\nstderr:\n{e}"
    return [o for _, o, _ in results]


def _method1(top):
    """Can a plain process (FileComm of one) build a method-1 store here?"""
    (rc, out, err), = _run(top, """
        import tempfile
        s = pyddstore.PyDDStore(pyddstore.FileComm(tempfile.mkdtemp(), 0, 1, "probe"),
                                method=1)
        s.free()
        print("M1")
    """, [{}])
    return rc == 0 and "M1" in out, err.strip().splitlines()[-1:] if err else ""


@pytest.mark.skipif(not pyddstore.HAVE_MPI, reason="an MPI build chooses MPI for comm=None")
def test_torchrun_uses_torch_distributed_not_one_rank_mpi(top, tmp_path):
    """torch.distributed of 2 (gloo, file://) with MPI's world of 1: comm=None
    is the torch.distributed group and method 1, one store of 2 ranks."""
    ok, why = _method1(top)
    if not ok:
        pytest.skip(f"method 1 not available in this build: {why}")
    init = f"file://{tmp_path}/pg"
    code = """
        import torch.distributed as dist
        from mpi4py import MPI
        r = int(os.environ["RANK"])
        dist.init_process_group("gloo", init_method=os.environ["INIT"], rank=r,
                                world_size=int(os.environ["WORLD_SIZE"]))
        assert MPI.COMM_WORLD.Get_size() == 1
        ds = DistDataset(src, "tr", handshake_dir=os.environ["HS"])   # comm=None
        assert ds.comm.kind == "torch", ds.comm
        assert ds.method == 1, ds.method
        assert ds.ddstore.size == 2 and ds.ddstore.rank == r, ds.ddstore
        assert (ds.lo, ds.hi) == ((0, 5) if r == 0 else (5, 10)), (ds.lo, ds.hi)
        for i in range(10):                      # rows of both ranks
            x, y = ds[i]
            assert torch.equal(x, src[i][0]) and int(y) == i, (i, x, y)
        dist.barrier()
        ds.free()
        dist.destroy_process_group()
        print("TORCH-OK", r)
    """
    os.makedirs(tmp_path / "hs", mode=0o700)
    envs = [dict(RANK=r, LOCAL_RANK=r, WORLD_SIZE=2, INIT=init, HS=tmp_path / "hs")
            for r in range(2)]
    outs = _ok(_run(top, code, envs))
    assert all(f"TORCH-OK {r}" in o for r, o in enumerate(outs)), outs


@pytest.mark.parametrize("var,value", [("WORLD_SIZE", 4), ("PMI_SIZE", 2),
                                       ("SLURM_STEP_NUM_TASKS", 3)])
def test_several_ranks_but_a_one_rank_comm_is_an_error(top, var, value):
    """The environment says several processes, the communicator resolved
    from None has one: RuntimeError naming the variable and the fixes, in
    DistDataset and in PyDDStore(None); an explicit COMM_SELF still works."""
    code = f"""
        _, e = outcome(lambda: DistDataset(src, "x"))
        assert isinstance(e, RuntimeError), repr(e)
        msg = str(e)
        assert "{var}={value}" in msg and "1 rank" in msg and "COMM_SELF" in msg, msg
        if "{var}" == "WORLD_SIZE" and pyddstore.HAVE_MPI:
            assert "init_process_group" in msg, msg
        print("DD:", msg)
        if pyddstore.HAVE_MPI:
            from mpi4py import MPI
            _, e = outcome(lambda: pyddstore.PyDDStore(None))
            assert isinstance(e, RuntimeError), repr(e)
            assert "{var}={value}" in str(e) and "COMM_SELF" in str(e), str(e)
            print("STORE:", e)
            # the README's explicit MPI.COMM_WORLD (under torchrun: a singleton)
            for call in (lambda: DistDataset(src, "w", MPI.COMM_WORLD),
                         lambda: pyddstore.PyDDStore(MPI.COMM_WORLD)):
                _, e = outcome(call)
                assert isinstance(e, RuntimeError), repr(e)
                assert "comm_or_none=MPI.COMM_WORLD" in str(e) or \
                    "comm=MPI.COMM_WORLD" in str(e), str(e)
                assert "{var}={value}" in str(e) and "COMM_SELF" in str(e), str(e)
            s = pyddstore.PyDDStore(MPI.COMM_SELF)          # deliberate: fine
            s.add("v", np.arange(6.0).reshape(3, 2))
            s.free()
            ds = DistDataset(src, "self", MPI.COMM_SELF)   # deliberate: fine
            assert len(ds) == 10 and ds.ddstore.size == 1
            ds.free()
        print("ERR-OK")
    """
    extra = {var: value}
    if var == "SLURM_STEP_NUM_TASKS":
        extra.update(SLURM_NTASKS=value, SLURM_PROCID=0, SLURM_JOB_ID=7, SLURM_STEP_ID=0)
    if not pyddstore.HAVE_MPI and var != "WORLD_SIZE":
        pytest.skip("without MPI a FileComm takes its size from these variables")
    (out,) = _ok(_run(top, code, [extra]))
    assert "ERR-OK" in out, out


@pytest.mark.skipif(not pyddstore.HAVE_MPI, reason="checks MPI_COMM_WORLD of one rank")
@pytest.mark.parametrize("extra", [dict(SLURM_NTASKS=8, SLURM_JOB_ID=7),
                                   dict(SLURM_NTASKS=8, SLURM_STEP_NUM_TASKS=1,
                                        SLURM_PROCID=0),
                                   dict(WORLD_SIZE=1, RANK=0), {}])
def test_one_process_launches_are_fine(top, extra):
    """SLURM_NTASKS alone is the allocation, not this launch (a one-task
    python in a batch script); a launch of one says one."""
    (out,) = _ok(_run(top, """
        from mpi4py import MPI
        s = pyddstore.PyDDStore(None)
        s.free()
        s = pyddstore.PyDDStore(MPI.COMM_WORLD)
        s.free()
        ds = DistDataset(src, "one")
        assert ds.comm.kind == "mpi" and ds.ddstore.size == 1 and len(ds) == 10
        ds.free()
        print("ONE-OK")
    """, [extra]))
    assert "ONE-OK" in out
