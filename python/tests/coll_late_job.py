"""One job of test_collective_late.py: rank 1 enters epoch_begin() late, or
never; the job then ends the ordinary way (interpreter exit, MPI_Finalize
where it is due), so that the test sees how the processes exit.

    coll_late_job.py --comm mpi|file --late S --dir D

rank 1 enters epoch_begin() S seconds after the others: within their
DDSTORE_COLLECTIVE_TIMEOUT_S the call passes everywhere; after it the others
have failed with a timeout and rank 1's call meets their abandoned one.
Each rank writes "RESULT <rank> <key> <value>" lines to D/result.<rank>.
"""
import argparse
import os
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--comm", required=True, choices=["mpi", "file"])
    ap.add_argument("--late", type=float, default=0.0)
    ap.add_argument("--dir", required=True)
    a = ap.parse_args()

    import pyddstore
    if a.comm == "mpi":
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        rank, method = comm.Get_rank(), 0
    else:
        comm = pyddstore.FileComm(os.path.join(a.dir, "fc"), ns="job")
        rank, method = comm.rank, 1
    lines = []

    def out(key, value):
        lines.append(f"RESULT {rank} {key} {value}")

    s = pyddstore.PyDDStore(comm, method=method)
    s.add("base", np.full((3, 2), rank, dtype=np.float32))
    if rank == 1:
        time.sleep(a.late)
    try:
        s.epoch_begin()
        out("call", "passed")
    except pyddstore.DDStoreError as e:
        out("call", "raised " + str(e).replace("\n", " "))
    with open(os.path.join(a.dir, f"result.{rank}"), "w") as f:
        f.write("\n".join(lines) + "\n")
    # the ordinary end: the store goes at exit, MPI finalises (or not) there


if __name__ == "__main__":
    main()
