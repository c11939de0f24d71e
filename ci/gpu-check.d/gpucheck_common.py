"""Shared by the torch-level GPU checks in ci/gpu-check.d (*_check.py).

Environment (set by the hooks, see store_common.bash):
  GPUCHECK_DEVICE     cuda (default) or cpu: the dry run of the same logic
                      with CPU tensors on a machine without a GPU
  GPUCHECK_TRANSPORT  mpi (default): launched by tools/ddrun, the MPI
                      communicator, method 0 (MPI RMA); file: plain processes
                      with SLURM_PROCID/SLURM_NTASKS, pyddstore.FileComm in
                      GPUCHECK_HSDIR, method 1 (libfabric, DDSTORE_FABRIC)
  GPUCHECK_HSDIR      the FileComm directory (file transport)

Every check is an assertion: a failure raises, the rank exits non-zero and
the launcher fails the hook.  Figures are printed, never asserted.
"""
import json
import os
import sys
import time

import torch  # before MPI starts (pyddstore.torch's rule)

import pyddstore
from pyddstore import _core


class Ctx:
    """What a check needs: the communicator, method, rank/size, device."""

    def __init__(self, name):
        self.device_kind = os.environ.get("GPUCHECK_DEVICE", "cuda")
        self.transport = os.environ.get("GPUCHECK_TRANSPORT", "mpi")
        if self.device_kind not in ("cuda", "cpu"):
            raise SystemExit(f"GPUCHECK_DEVICE={self.device_kind}: expected cuda or cpu")
        if self.transport == "mpi":
            from mpi4py import MPI
            self.comm = MPI.COMM_WORLD
            self.store_comm = None          # PyDDStore(None): MPI_COMM_WORLD
            self.method = 0
            self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        elif self.transport == "file":
            hs = os.environ.get("GPUCHECK_HSDIR") or os.environ.get("DDSTORE_HANDSHAKE_DIR")
            if not hs:
                raise SystemExit("file transport: GPUCHECK_HSDIR is not set")
            self.comm = pyddstore.FileComm(hs, ns=name)
            self.store_comm = self.comm
            self.method = 1
            self.rank, self.size = self.comm.rank, self.comm.size
        else:
            raise SystemExit(f"GPUCHECK_TRANSPORT={self.transport}: expected mpi or file")
        from pyddstore.torch import comm as _comm
        self._c = _comm.resolve(self.comm, os.environ.get("GPUCHECK_HSDIR"), name)
        if self.device_kind == "cuda":
            if _core.GPU_BACKEND != "cuda":
                raise AssertionError(f"pyddstore._core.GPU_BACKEND is {_core.GPU_BACKEND!r}, "
                                     "expected 'cuda'")
            if not torch.cuda.is_available():
                raise AssertionError("torch.cuda.is_available() is False")
            idx = self.rank % torch.cuda.device_count()
            torch.cuda.set_device(idx)
            self.device = torch.device("cuda", idx)
            self.dev_name = torch.cuda.get_device_name(idx)
        else:
            self.device = torch.device("cpu")
            self.dev_name = "cpu (dry run)"
        self.is_cuda = self.device.type == "cuda"

    def allgather(self, obj):
        # pyddstore's wire format carries no floats (None/bool/int/str and
        # containers only): the figures travel as one JSON string per rank
        return [json.loads(x) for x in self._c.allgather(json.dumps(obj))]

    def barrier(self):
        self._c.barrier()

    def sync(self):
        """Wait for this device's queued work (timing only; never in a loader)."""
        if self.is_cuda:
            torch.cuda.synchronize(self.device)

    def to_device(self, t):
        """A CPU tensor on this device without a host sync: copied from pinned
        memory, queued on the current stream (a plain .to() from pageable
        memory would synchronise the stream)."""
        if not self.is_cuda:
            return t
        return t.pin_memory().to(self.device, non_blocking=True)

    def say(self, *a):
        # one write per line: ranks share the launcher's output pipe
        sys.stdout.write(f"rank {self.rank}: " + " ".join(str(x) for x in a) + "\n")
        sys.stdout.flush()

    def header(self, what):
        if self.rank == 0:
            gi = _core._gpu_info() if self.is_cuda else {}
            print(f"== {what}: {self.size} ranks, transport {self.transport} (method "
                  f"{self.method}), device {self.dev_name}; pyddstore {pyddstore.__version__} "
                  f"(GPU backend {_core.GPU_BACKEND}, MPI {pyddstore.HAVE_MPI}, libfabric "
                  f"{pyddstore.HAVE_OFI}); torch {torch.__version__} (CUDA {torch.version.cuda})"
                  + (f"; runtime {gi.get('runtime_version')}, driver {gi.get('driver_version')}"
                     if gi else ""), flush=True)

    def describe(self):
        return {"ranks": self.size, "transport": self.transport, "method": self.method,
                "device": self.dev_name, "gpu_backend": _core.GPU_BACKEND,
                "pyddstore": pyddstore.__version__, "torch": torch.__version__,
                "torch_cuda": torch.version.cuda, "time": time.strftime("%Y-%m-%dT%H:%M:%S")}


def write_json(ctx, filename, obj):
    """$OUT/filename (rank 0), when OUT is set and is a directory."""
    out = os.environ.get("OUT")
    if ctx.rank != 0 or not out or not os.path.isdir(out):
        return None
    path = os.path.join(out, filename)
    with open(path, "w") as fh:
        json.dump(obj, fh, indent=1)
    print(f"wrote {path}", flush=True)
    return path


def done(ctx, what):
    ctx.barrier()
    ctx.say(f"{what}: OK")
    sys.stdout.flush()
