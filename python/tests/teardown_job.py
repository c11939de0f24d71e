"""One rank of a teardown job (test_teardown.py): a DistDataset read once,
then the end the test names:

  pg_gone_free   destroy the torch.distributed group, then free()
  pg_gone_exit   destroy the torch.distributed group, exit without free()
  exit           exit without free() (no torch.distributed group)

    teardown_job.py MODE METHOD HANDSHAKE_DIR PORT

Prints "pid <rank> <pid>" first (the test looks for what these processes
left in /dev/shm) and "done <rank>" at the end."""
import os
import sys

import torch

mode, method, hs, port = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
sys.stdout.write(f"pid {rank} {os.getpid()}\n")   # one write: ranks interleave
sys.stdout.flush()
group = mode.startswith("pg_gone")
if group:
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank),
                      WORLD_SIZE=str(size))
    dist.init_process_group("gloo")

from pyddstore.torch import DistDataset  # noqa: E402

src = [(torch.full((4,), float(i)),) for i in range(16)]
ds = DistDataset(src, "teardown", method=method, handshake_dir=hs)
i = (rank * 5 + 3) % 16
assert float(ds[i][0][0]) == float(i)
if group:
    dist.destroy_process_group()
if mode == "pg_gone_free":
    ds.free()
sys.stdout.write(f"done {rank}\n")
sys.stdout.flush()
