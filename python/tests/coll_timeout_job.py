"""One job of test_collectives.py: every rank but one makes a collective call,
and the ranks that did must fail within DDSTORE_COLLECTIVE_TIMEOUT_S instead
of waiting forever; the store then refuses further collectives at once and
releases locally; the rank that skipped fails its next collective too.

    coll_timeout_job.py --comm mpi|mpibytes|file|torch --call CALL --skip R --dir D

mpibytes: MPI, with pyddstore.torch's collectives over the Python byte mover
(as for an mpi4py over another MPI library than pyddstore's).

CALL: add, init, free, epoch_begin, epoch_end, dataset (DistDataset(...)).
Each rank writes lines "RESULT <rank> <key> <value>" to DIR/result.<rank>
(and stdout) for the test to check: files, because a launcher may drop the
output of ranks still running when the first one leaves without
MPI_Finalize.
"""
import argparse
import os
import sys
import time

import numpy as np


_RESULTS = []


def out(rank, key, value):
    line = f"RESULT {rank} {key} {value}"
    print(line, flush=True)
    _RESULTS.append(line)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--comm", required=True, choices=["mpi", "mpibytes", "file", "torch"])
    ap.add_argument("--call", required=True)
    ap.add_argument("--skip", type=int, default=1)
    ap.add_argument("--dir", required=True)
    a = ap.parse_args()
    timeout = float(os.environ["DDSTORE_COLLECTIVE_TIMEOUT_S"])

    if a.comm == "torch" or a.call == "dataset":
        import torch  # noqa: F401  (before MPI starts)
    import pyddstore

    if a.comm == "mpibytes":
        pyddstore._core.mpi_same_library = lambda: False
    if a.comm in ("mpi", "mpibytes"):
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        rank, size, method = comm.Get_rank(), comm.Get_size(), 0
    elif a.comm == "file":
        comm = pyddstore.FileComm(os.path.join(a.dir, "fc"), ns="job")
        rank, size, method = comm.rank, comm.size, 1
    else:
        import torch.distributed as dist
        from pyddstore.torch.comm import TorchComm
        rank, size = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
        dist.init_process_group("gloo", init_method="file://" + os.path.join(a.dir, "init"),
                                rank=rank, world_size=size)
        comm, method = TorchComm(), 1

    s = pyddstore.PyDDStore(comm, method=method)
    s.add("base", np.full((3, 2), rank, dtype=np.float32))
    s.epoch_begin()
    out(rank, "setup", "ok")

    def dataset(name):
        import torch
        from pyddstore.torch import DistDataset
        src = torch.utils.data.TensorDataset(torch.arange(8.0).reshape(8, 1))
        DistDataset(src, name, comm=comm, method=method,
                    handshake_dir=os.path.join(a.dir, "hs"))

    if rank == a.skip:
        # the rank that skips: it stays away longer than the others wait, then
        # its own next collective (on the same communicator) must fail too,
        # never match theirs
        time.sleep(timeout + 2)
        t0 = time.monotonic()
        try:
            if a.call == "dataset":
                dataset("ds2")
            else:
                s.epoch_end()
            out(rank, "next", "passed")
        except pyddstore.DDStoreError as e:
            out(rank, "next", "raised " + str(e).replace("\n", " "))
        out(rank, "next_s", f"{time.monotonic() - t0:.1f}")
    else:
        t0 = time.monotonic()
        try:
            if a.call == "add":
                s.add("x", np.ones((4, 2), np.float64))
            elif a.call == "init":
                s.init("x", 4, 2, 8)
            elif a.call == "free":
                s.free()
            elif a.call == "epoch_begin":
                s.epoch_begin()
            elif a.call == "epoch_end":
                s.epoch_end()
            elif a.call == "dataset":
                dataset("ds")
            out(rank, "call", "passed")
        except Exception as e:  # noqa: BLE001 - reported to the test
            out(rank, "call", f"raised {type(e).__name__}: " + str(e).replace("\n", " "))
        out(rank, "call_s", f"{time.monotonic() - t0:.1f}")
        if a.call != "dataset":
            t0 = time.monotonic()
            try:
                s.epoch_begin()
                out(rank, "after", "passed")
            except pyddstore.DDStoreError as e:
                out(rank, "after", "raised " + str(e).replace("\n", " "))
            out(rank, "after_s", f"{time.monotonic() - t0:.1f}")
    if a.call != "dataset":     # (there `s` itself is still in step)
        t0 = time.monotonic()
        try:
            s.free()
            out(rank, "free", "ok")
        except pyddstore.DDStoreError as e:
            out(rank, "free", "raised " + str(e).replace("\n", " "))
        out(rank, "free_s", f"{time.monotonic() - t0:.1f}")
    with open(os.path.join(a.dir, f"result.{rank}"), "w") as f:
        f.write("\n".join(_RESULTS) + "\n")
    sys.stdout.flush()
    # wait until every rank reported (a rank that exits first makes the
    # launcher kill the others)
    open(os.path.join(a.dir, f"done.{rank}"), "w").close()
    t0 = time.monotonic()
    while time.monotonic() - t0 < 4 * timeout + 30 and not all(
            os.path.exists(os.path.join(a.dir, f"done.{r}")) for r in range(size)):
        time.sleep(0.05)
    # The job is broken: leave without MPI_Finalize / process-group teardown,
    # which could wait for the abandoned requests (what a user's job does
    # when the exception ends it: the launcher kills the rest).
    os._exit(0)


if __name__ == "__main__":
    main()
